package ipybox_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/ipybox/ipybox"
)

// A kernel's namespace outlives its Executor: Snapshot saves it in the
// Executor's snapshot folder (inside the workspace's .ipybox), and a later
// Executor given the same folder restores it into its fresh kernel.
func ExampleExecutor_Snapshot() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "ipybox-example")
	defer os.RemoveAll(dir)
	opts := &ipybox.Options{WorkDir: dir, SnapshotDir: filepath.Join(dir, ".ipybox", "snapshots", "example")}

	ex, err := ipybox.Start(ctx, opts)
	if err != nil {
		fmt.Println(err)
		return
	}
	ex.Execute(ctx, "import math\nradius = 2.0", nil)
	if _, err := ex.Snapshot(ctx, nil); err != nil {
		fmt.Println(err)
		return
	}
	ex.Close()

	later, err := ipybox.Start(ctx, opts)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer later.Close()
	if _, err := later.Restore(ctx); err != nil {
		fmt.Println(err)
		return
	}
	res, err := later.Execute(ctx, "print(round(math.pi * radius ** 2, 2))", nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(res.Text)
	// Output: 12.57
}

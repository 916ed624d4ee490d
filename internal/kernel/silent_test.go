package kernel_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ipybox/ipybox/internal/kernel"
)

// TestSilentCellBounded: what a silent (housekeeping) cell outputs is
// kernel code's to choose, since kernel code can replace what it calls; its
// Result keeps at most SilentKeepText of text and of displays, and none
// of its images reaches the disk.
func TestSilentCellBounded(t *testing.T) {
	t.Parallel()
	images := filepath.Join(t.TempDir(), "images")
	k := startKernel(t, &kernel.Options{ImagesDir: images})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res, err := k.Execute(ctx, "import sys, base64\nfrom IPython.display import publish_display_data as p\n"+
		"s = 'x' * (1 << 20)\nfor i in range(32):\n    sys.stdout.write(s); sys.stdout.flush()\n"+
		"for i in range(32):\n    p({'text/html': s})\n"+
		"for i in range(4):\n    p({'image/png': base64.b64encode(b'png' * 1000).decode()})\n",
		&kernel.ExecOptions{Silent: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Text) > kernel.SilentKeepText+1024 { // with the note of what was left out
		t.Errorf("the silent cell kept %d bytes of text", len(res.Text))
	}
	kept := 0
	for _, d := range res.Displays {
		for _, v := range d.Data {
			if s, ok := v.(string); ok {
				kept += len(s)
			}
		}
		if len(d.Images) > 0 {
			t.Errorf("a silent cell's image was saved: %v", d.Images)
		}
	}
	if kept > kernel.SilentKeepText {
		t.Errorf("the silent cell kept %d bytes of displays", kept)
	}
	if ents, _ := os.ReadDir(images); len(ents) > 0 {
		t.Errorf("%d images were saved", len(ents))
	}
}

// TestCellImageBudget: one cell saves a bounded amount of images (256 MiB;
// 1 MiB here); past that, images are dropped, and the text says so.
func TestCellImageBudget(t *testing.T) {
	defer kernel.SetMaxCellImageBytes(1 << 20)()
	images := filepath.Join(t.TempDir(), "images")
	k := startKernel(t, &kernel.Options{ImagesDir: images})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := k.Execute(ctx, "import base64\nfrom IPython.display import publish_display_data as p\n"+
		"s = base64.b64encode(b'\\x89PNG' + b'x' * 300000).decode()\nfor i in range(5):\n    p({'image/png': s})\n", nil)
	if err != nil {
		t.Fatal(err)
	}
	if ents, _ := os.ReadDir(images); len(ents) != 3 || len(res.Images) != 3 {
		t.Errorf("%d images saved (%d in the result), want 3", len(ents), len(res.Images))
	}
	if !strings.Contains(res.Text, "was not saved: this cell's images passed 1 MiB") {
		t.Errorf("text does not say why: %q", res.Text)
	}
	// The next cell has a budget of its own.
	res, err = k.Execute(ctx, "p({'image/png': s})", nil)
	if err != nil || len(res.Images) != 1 {
		t.Errorf("the next cell: %v, %v", err, res.Images)
	}
}

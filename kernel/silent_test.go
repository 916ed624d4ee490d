package kernel_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/ipybox/ipybox/kernel"
)

// TestSilentCellBounded: what a silent (housekeeping) cell outputs is
// kernel code's to choose, since kernel code can replace what it calls; its
// Result keeps at most SilentKeepText of text and of displays, and none
// of its images reaches the disk.
func TestSilentCellBounded(t *testing.T) {
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

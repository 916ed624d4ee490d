package kernel_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ipybox/ipybox/internal/kernel"
)

// TestKeepText: with KeepText, the Result keeps the head and the tail of
// the output and counts the rest; every byte still reaches OnEvent.
func TestKeepText(t *testing.T) {
	t.Parallel()
	k := startKernel(t, nil)
	var streamed strings.Builder
	res, err := k.Execute(context.Background(), "import sys\nfor i in range(1000):\n    sys.stdout.write('%04d\\n' % i)\nprint('display')", &kernel.ExecOptions{
		KeepText: 100,
		OnEvent: func(e kernel.Event) {
			if s, ok := e.(*kernel.Output); ok {
				streamed.WriteString(s.Text)
			}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if streamed.Len() != 5000+len("display\n") {
		t.Errorf("streamed %d bytes, want every one", streamed.Len())
	}
	if !strings.HasPrefix(res.Text, "0000\n0001\n") || !strings.HasSuffix(res.Text, "0999\ndisplay") {
		t.Errorf("head or tail missing: %q", res.Text)
	}
	if want := int64(5000 + 8 - 100); res.Omitted != want || !strings.Contains(res.Text, "bytes of output not kept") {
		t.Errorf("omitted %d, want %d: %q", res.Omitted, want, res.Text)
	}
	// Without KeepText, everything is kept.
	res, err = k.Execute(context.Background(), "print('x' * 5000)", nil)
	if err != nil || len(res.Text) != 5000 || res.Omitted != 0 {
		t.Errorf("whole: %d bytes, omitted %d, %v", len(res.Text), res.Omitted, err)
	}
}

// TestSlowConsumerLosesNothing: output still arriving after the reply, to
// a consumer slower than IdleGrace, is not cut off: the grace counts from
// the last message, not from the reply.
func TestSlowConsumerLosesNothing(t *testing.T) {
	t.Parallel()
	k := startKernel(t, &kernel.Options{IdleGrace: 100 * time.Millisecond})
	// Tens of megabytes: the last messages are still being decoded when
	// the (small) reply has arrived.
	n := 0
	res, err := k.Execute(context.Background(), "import sys\nfor i in range(32 * 1024):\n    sys.stdout.write('x' * 1023 + '\\n')", &kernel.ExecOptions{
		KeepText: 1024,
		OnEvent: func(e kernel.Event) {
			if s, ok := e.(*kernel.Output); ok {
				time.Sleep(150 * time.Millisecond) // slower than the grace
				n += len(s.Text)
			}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.Truncated || n != 32<<20 {
		t.Errorf("truncated %v, streamed %d bytes; want all %d", res.Truncated, n, 32<<20)
	}
}

// TestOneHugeWrite: one write longer than the host's message limit
// (jupyter.MaxMessage) arrives whole, in messages the host accepts, and the
// kernel lives on.
func TestOneHugeWrite(t *testing.T) {
	t.Parallel()
	k := startKernel(t, nil)
	const n = 200 << 20
	var got, biggest int
	_, err := k.Execute(context.Background(), "import sys\nsys.stdout.write('y' * (200 << 20))", &kernel.ExecOptions{
		KeepText: 1024,
		OnEvent: func(e kernel.Event) {
			if s, ok := e.(*kernel.Output); ok {
				got += strings.Count(s.Text, "y")
				biggest = max(biggest, len(s.Text))
			}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if got != n {
		t.Errorf("streamed %d of %d bytes (largest event %d)", got, n, biggest)
	}
	res, err := k.Execute(context.Background(), "print('alive')", nil)
	if err != nil || res.Text != "alive" {
		t.Errorf("after the huge write: %q, %v", res.Text, err)
	}
}

// TestKeepTextBoundsDisplays: a cell that floods rich displays (each with
// an HTML part the Result would hold) cannot make the host keep them all:
// past KeepText bytes, displays are streamed but not kept, and counted.
func TestKeepTextBoundsDisplays(t *testing.T) {
	t.Parallel()
	k := startKernel(t, nil)
	streamed := 0
	code := "from IPython.display import display, HTML\n" +
		"for i in range(200):\n    display(HTML('<p>%d</p>' % i + 'x' * 10000))\n" +
		"print('end')"
	res, err := k.Execute(context.Background(), code, &kernel.ExecOptions{
		KeepText: 100_000,
		OnEvent: func(e kernel.Event) {
			if _, ok := e.(*kernel.Display); ok {
				streamed++
			}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if streamed != 200 {
		t.Errorf("streamed %d displays, want all 200", streamed)
	}
	kept := 0
	for _, d := range res.Displays {
		kept += len(d.Data["text/html"].(string))
	}
	if kept > 100_000 || len(res.Displays) == 0 {
		t.Errorf("kept %d displays with %d bytes of HTML, want some and at most KeepText", len(res.Displays), kept)
	}
	if len(res.Displays)+res.OmittedDisplays != 200 {
		t.Errorf("kept %d + omitted %d displays, want 200", len(res.Displays), res.OmittedDisplays)
	}
	if last := res.Displays[len(res.Displays)-1]; !strings.HasPrefix(last.Data["text/html"].(string), "<p>"+strconv.Itoa(len(res.Displays)-1)+"</p>") {
		t.Errorf("the kept displays are not the first ones in order: last is %.20q", last.Data["text/html"])
	}
	if !strings.HasSuffix(res.Text, "end") {
		t.Errorf("the text lost its tail: %q", res.Text[max(0, len(res.Text)-40):])
	}
	// Without KeepText, every display is kept.
	res, err = k.Execute(context.Background(), code, nil)
	if err != nil || len(res.Displays) != 200 || res.OmittedDisplays != 0 {
		t.Errorf("whole: %d displays, %d omitted, %v", len(res.Displays), res.OmittedDisplays, err)
	}
}

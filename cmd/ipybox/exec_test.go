package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/ipybox/ipybox"
	"github.com/ipybox/ipybox/internal/escape"
)

// TestPrinterEscapes: on a terminal, every kind of text the kernel sends
// reaches it escaped, and ipybox's own messages follow a colour reset.
func TestPrinterEscapes(t *testing.T) {
	t.Parallel()
	var out, errOut bytes.Buffer
	env := &cliEnv{stdout: escape.NewWriter(&out), stderr: escape.NewWriter(&errOut)}
	p := newPrinter(env, false)
	p.event(0, &ipybox.Output{Stream: "stdout", Text: "\x1b[8mout\x1b]52;c;eA==\x07"})
	p.event(0, &ipybox.Output{Stream: "stderr", Text: "err\x1b[3A\x1b"})
	p.event(0, &ipybox.Display{Text: "display\x1b[2K\u009b"})
	p.fail(0, &ipybox.PythonError{Name: "E", Traceback: []string{"\x1b[31mtrace\x1b[0m\x1bc"}})
	p.event(0, &ipybox.Result{Truncated: true})
	flushTerminal(env)

	wantOut := "\x1b[8mout" + `\x1b]52;c;eA==\x07` + "display" + `\x1b[2K\x9b` + "\n\x1b[0m"
	if out.String() != wantOut {
		t.Errorf("stdout = %q, want %q", out.String(), wantOut)
	}
	wantErr := "err" + `\x1b[3A\x1b` + "\x1b[31mtrace\x1b[0m" + `\x1bc` + "\nipybox: the kernel"
	if !strings.HasPrefix(errOut.String(), wantErr) {
		t.Errorf("stderr = %q, want it to start with %q", errOut.String(), wantErr)
	}
}

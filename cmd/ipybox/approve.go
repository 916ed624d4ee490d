package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"

	"github.com/ipybox/ipybox"
	"github.com/ipybox/ipybox/internal/approvaltext"
	"github.com/ipybox/ipybox/internal/escape"
)

// Approval modes of --approval.
const (
	approvalAuto   = "auto"
	approvalPrompt = "prompt"
	approvalReject = "reject"
)

func checkApprovalMode(mode string) error {
	switch mode {
	case approvalAuto, approvalPrompt, approvalReject:
		return nil
	}
	return fmt.Errorf("--approval %q: want auto, prompt or reject", mode)
}

// terminalDecider answers approval requests for the CLI.
type terminalDecider struct {
	mode string
	// openTTY opens the controlling terminal; a test may replace it.
	openTTY func() (io.ReadWriteCloser, error)
	mu      sync.Mutex
}

func newDecider(mode string) *terminalDecider {
	return &terminalDecider{mode: mode, openTTY: func() (io.ReadWriteCloser, error) {
		return os.OpenFile("/dev/tty", os.O_RDWR, 0)
	}}
}

// decide accepts or rejects r according to the mode. In prompt mode it asks
// on the terminal (not on stdin, which may carry the code); without a
// terminal it rejects.
func (d *terminalDecider) decide(r *ipybox.ApprovalRequest) {
	switch d.mode {
	case approvalAuto:
		r.Accept()
		return
	case approvalReject:
		r.Reject("rejected by --approval reject")
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	tty, err := d.openTTY()
	if err != nil {
		r.Reject("--approval prompt: no terminal to ask on, so the call is rejected")
		return
	}
	defer tty.Close()
	if ok, err := ask(tty, r); err != nil {
		r.Reject("--approval prompt: " + err.Error())
	} else if ok {
		r.Accept()
	} else {
		r.Reject("rejected at the prompt")
	}
}

func ask(tty io.ReadWriter, r *ipybox.ApprovalRequest) (bool, error) {
	// Kernel code chose every byte shown here: escaped, a control
	// sequence cannot hide or rewrite the command on the terminal. The
	// reset first undoes colours that kernel output set (exec lets them
	// through): black on black would hide the prompt.
	io.WriteString(tty, sgrReset)
	// approvaltext summarises honestly what the MCP server's elicitation
	// shows too: every line numbered, blank runs counted, and a long
	// command's first and last lines with what is not shown between.
	switch r.Kind {
	case "shell":
		fmt.Fprintf(tty, "\nipybox: run shell command?\n  %s\n", indent(approvaltext.Command(r.Command), "  "))
	default:
		fmt.Fprintf(tty, "\nipybox: allow tool call?\n  server: %s\n  tool:   %s\n  args:   %s\n", escape.Text(r.Server), escape.Text(r.Tool), indent(approvaltext.Args(r.Args), "          "))
	}
	fmt.Fprint(tty, "[y/N] ")
	line, err := bufio.NewReader(tty).ReadString('\n')
	if err != nil && !errors.Is(err, io.EOF) {
		return false, err
	}
	a := strings.ToLower(strings.TrimSpace(line))
	return a == "y" || a == "yes", nil
}

// sgrReset restores a terminal's default colours.
const sgrReset = "\x1b[0m"

func indent(text, prefix string) string {
	return strings.ReplaceAll(text, "\n", "\n"+prefix)
}

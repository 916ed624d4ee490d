package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/user"
	"strings"
	"sync"
	"time"

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

// promptChannel names the terminal prompt in the audit log.
const promptChannel = "terminal prompt"

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

// decide answers r according to the mode. In prompt mode it asks on the
// terminal (not on stdin, which may carry the code); without a terminal
// it rejects. An ask rule of the approval policy makes auto mode ask on
// the terminal too, or reject when there is none.
func (d *terminalDecider) decide(r *ipybox.ApprovalRequest) {
	switch {
	case d.mode == approvalAuto && !r.RuleAsks():
		r.Answer(ipybox.Answer{Accept: true, By: "default", Channel: "--approval auto"})
		return
	case d.mode == approvalReject:
		r.Answer(ipybox.Answer{Reason: "rejected by --approval reject", By: "default", Channel: "--approval reject"})
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	tty, err := d.openTTY()
	if err != nil {
		why := "--approval prompt: no terminal to ask on, so the call is rejected"
		if d.mode == approvalAuto {
			why = "an ask rule of the approval policy asks about this call, and there is no terminal to ask on, so it is rejected"
		}
		r.Answer(ipybox.Answer{Reason: why, By: "default", Channel: promptChannel})
		return
	}
	defer tty.Close()
	// The request stops waiting at its deadline, and so does the prompt:
	// the cell's events must not wait behind a person who has gone.
	if dl, ok := tty.(interface{ SetReadDeadline(time.Time) error }); ok && !r.Deadline.IsZero() {
		dl.SetReadDeadline(r.Deadline)
	}
	if err := prompt(tty, r); err != nil {
		r.Answer(ipybox.Answer{Reason: "--approval prompt: " + err.Error(), By: "default", Channel: promptChannel})
	}
}

// choice is one answer the prompt offers.
type choice struct {
	key, text string
	accept    bool
	remember  ipybox.Remember
}

var choices = []choice{
	{"y", "yes, once", true, ipybox.RememberOnce},
	{"s", "yes, for this session", true, ipybox.RememberSession},
	{"a", "yes, always (writes the rule into the policy)", true, ipybox.RememberAlways},
	{"n", "no, once", false, ipybox.RememberOnce},
	{"ns", "no, for this session", false, ipybox.RememberSession},
	{"na", "no, always (writes a deny rule)", false, ipybox.RememberAlways},
}

// prompt asks on tty and answers r; an error means nothing could be read.
func prompt(tty io.ReadWriter, r *ipybox.ApprovalRequest) error {
	in := bufio.NewReader(tty)
	// Kernel code chose every byte shown here: escaped, a control
	// sequence cannot hide or rewrite the command on the terminal. The
	// reset first undoes colours that kernel output set (exec lets them
	// through): black on black would hide the prompt.
	io.WriteString(tty, sgrReset)
	// approvaltext summarises honestly what the MCP server's elicitation
	// shows too: every line numbered, blank runs counted, and a long
	// command's first and last lines with what is not shown between; then
	// why it asks, and what remembering the answer writes.
	switch r.Kind {
	case "shell":
		fmt.Fprintf(tty, "\nipybox: run shell command?\n  %s\n", indent(approvaltext.Command(r.Command), "  "))
	default:
		fmt.Fprintf(tty, "\nipybox: allow tool call?\n  server: %s\n  tool:   %s\n  args:   %s\n", escape.Text(r.Server), escape.Text(r.Tool), indent(approvaltext.Args(r.Args), "          "))
	}
	for _, f := range r.Facts() {
		fmt.Fprintf(tty, "  %s\n", f)
	}
	offered := offer(r, nil)
	if len(offered) <= 2 {
		// Nothing can be remembered (no approval policy): the old question.
		fmt.Fprint(tty, "[y/N] ")
		line, err := readLine(in)
		if err != nil {
			return err
		}
		if a := strings.ToLower(line); a == "y" || a == "yes" {
			return r.Answer(answer(choices[0], nil))
		}
		return r.Answer(answer(choices[3], nil))
	}
	var rules []string // a rule the person typed, widening the answer
	for range 5 {
		keys := make([]string, 0, len(offered)+1)
		for _, c := range offered {
			fmt.Fprintf(tty, "  %-2s = %s\n", c.key, c.text)
			k := c.key
			if k == "n" {
				k = "N"
			}
			keys = append(keys, k)
		}
		if rules == nil {
			fmt.Fprintln(tty, "  e  = edit the rule to remember (to widen it), then choose")
			keys = append(keys, "e")
		}
		fmt.Fprintf(tty, "[%s] ", strings.Join(keys, "/"))
		line, err := readLine(in)
		if err != nil {
			return err
		}
		key := strings.ToLower(line)
		if key == "yes" {
			key = "y"
		}
		if key == "e" && rules == nil {
			fmt.Fprint(tty, "rule to remember (tool SERVER.TOOL ..., or shell COMMAND ...): ")
			text, err := readLine(in)
			if err != nil {
				return err
			}
			for _, w := range []string{"allow ", "deny ", "ask "} {
				text = strings.TrimPrefix(text, w)
			}
			rules = []string{text}
			offered = offer(r, rules)
			continue
		}
		c, ok := findChoice(offered, key)
		if !ok {
			c = choices[3] // anything else is no, as before
		}
		err = r.Answer(answer(c, rules))
		if errors.Is(err, ipybox.ErrCannotRemember) {
			fmt.Fprintf(tty, "ipybox: %s\n", escape.Text(err.Error()))
			rules, offered = nil, offer(r, nil)
			continue
		}
		return err
	}
	return r.Answer(answer(choices[3], nil))
}

// offer returns the choices that r can take: each remembered one only
// where it can be remembered; with rules typed, only remembered ones.
func offer(r *ipybox.ApprovalRequest, rules []string) []choice {
	var out []choice
	for _, c := range choices {
		once := c.remember == ipybox.RememberOnce
		if once && rules != nil || !once && r.CanRemember(c.accept, c.remember) != nil {
			continue
		}
		out = append(out, c)
	}
	return out
}

func findChoice(cs []choice, key string) (choice, bool) {
	for _, c := range cs {
		if c.key == key {
			return c, true
		}
	}
	return choice{}, false
}

func answer(c choice, rules []string) ipybox.Answer {
	a := ipybox.Answer{Accept: c.accept, Remember: c.remember, Rules: rules, By: "person", Channel: promptChannel, Person: personName()}
	if !c.accept {
		a.Reason = "rejected at the prompt"
	}
	return a
}

// readLine reads one answer; end of input is an empty answer.
func readLine(in *bufio.Reader) (string, error) {
	line, err := in.ReadString('\n')
	if err != nil && !errors.Is(err, io.EOF) {
		return "", err
	}
	return strings.TrimSpace(line), nil
}

// personName is the user at this terminal, for the audit log.
func personName() string {
	if u, err := user.Current(); err == nil {
		return u.Username
	}
	return ""
}

// sgrReset restores a terminal's default colours.
const sgrReset = "\x1b[0m"

func indent(text, prefix string) string {
	return strings.ReplaceAll(text, "\n", "\n"+prefix)
}

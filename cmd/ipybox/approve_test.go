package main

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/ipybox/ipybox"
	"github.com/ipybox/ipybox/internal/approvaltext"
)

// TestPromptEscapes: the terminal prompt shows kernel-chosen text with every
// character that could hide the real command made visible.
func TestPromptEscapes(t *testing.T) {
	t.Parallel()
	payload := "echo safe\r\x1b[2K\x1b[1G\x1b[8mrm -rf ~\u202e\u2066\x9b\u200b"
	for _, r := range []*ipybox.ApprovalRequest{
		{Kind: "shell", Command: payload},
		{Kind: "tool", Server: "s\x1b[8m", Tool: "t\r", Args: json.RawMessage(`{"a":"` + payload + `"}`)},
	} {
		tty := &fakeTTY{Reader: strings.NewReader("n\n")}
		// A request made by hand has no call waiting on it: the answer
		// goes nowhere, and says so.
		if err := prompt(tty, r); !errors.Is(err, ipybox.ErrNotPending) {
			t.Fatalf("prompt = %v", err)
		}
		shown, ok := strings.CutPrefix(tty.out.String(), sgrReset)
		if !ok {
			t.Errorf("the prompt does not reset the colours first: %q", tty.out.String())
		}
		for _, raw := range []string{"\r", "\x1b", "\u202e", "\u2066", "\x9b", "\u200b"} {
			if strings.Contains(shown, raw) {
				t.Errorf("the prompt holds a raw %q: %q", raw, shown)
			}
		}
		if !strings.Contains(shown, "rm -rf ~") || !strings.Contains(shown, `\u202e`) {
			t.Errorf("the prompt hides the command: %q", shown)
		}
	}
}

// TestPromptShowsEveryLine: a command whose first line would scroll out of
// view behind blank lines (or a tool call's arguments as long) is shown
// with every line that runs, numbered, the blank ones counted, and the
// counts beside the question: the same summary the MCP server's
// elicitation shows (approvaltext).
func TestPromptShowsEveryLine(t *testing.T) {
	t.Parallel()
	for _, r := range []*ipybox.ApprovalRequest{
		{Kind: "shell", Command: "touch /tmp/pwned" + strings.Repeat("\n", 121) + "ls"},
		{Kind: "shell", Command: "touch /tmp/pwned\n" + strings.Repeat(":\n", 5000) + "ls"},
		{Kind: "tool", Server: "s", Tool: "t", Args: json.RawMessage(`{"a":"touch /tmp/pwned` + strings.Repeat(" ", 1<<20) + `ls"}`)},
	} {
		tty := &fakeTTY{Reader: strings.NewReader("n\n")}
		// A request made by hand has no call waiting on it: the answer
		// goes nowhere, and says so.
		if err := prompt(tty, r); !errors.Is(err, ipybox.ErrNotPending) {
			t.Fatalf("prompt = %v", err)
		}
		shown := tty.out.String()
		var want string
		if r.Kind == "shell" {
			want = approvaltext.Command(r.Command)
		} else {
			want = approvaltext.Args(r.Args)
		}
		for _, line := range strings.Split(want, "\n") {
			if !strings.Contains(shown, line) {
				t.Errorf("the prompt lacks the line %q of the summary:\n%s", line, shown)
			}
		}
		if !strings.Contains(shown, "touch /tmp/pwned") || !strings.Contains(shown, "ls") || len(shown) > 16<<10 {
			t.Errorf("the prompt (%d bytes) does not show the first and the last line, bounded:\n%.2000s", len(shown), shown)
		}
	}
}

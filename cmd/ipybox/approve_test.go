package main

import (
	"strings"
	"testing"

	"github.com/ipybox/ipybox"
)

// TestPromptEscapes: the terminal prompt shows kernel-chosen text with every
// character that could hide the real command made visible.
func TestPromptEscapes(t *testing.T) {
	t.Parallel()
	payload := "echo safe\r\x1b[2K\x1b[1G\x1b[8mrm -rf ~\u202e\u2066\x9b\u200b"
	for _, r := range []*ipybox.ApprovalRequest{
		{Kind: "shell", Command: payload},
		{Kind: "tool", Server: "s\x1b[8m", Tool: "t\r", Args: map[string]any{"a": payload}},
	} {
		tty := &fakeTTY{Reader: strings.NewReader("n\n")}
		if ok, err := ask(tty, r); ok || err != nil {
			t.Fatalf("ask = %v, %v", ok, err)
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

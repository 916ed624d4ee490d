package mcpserver

import (
	"encoding/json"
	"fmt"
	"path"
	"strings"

	"github.com/ipybox/ipybox"
	"github.com/ipybox/ipybox/internal/approvaltext"
	"github.com/ipybox/ipybox/internal/defaults"
	"github.com/ipybox/ipybox/internal/escape"
)

// elicitTimeout bounds an approval question that has no deadline of its
// own; the executor gives every one its approval timeout (5 minutes by
// default) or the cell's remaining time.
const elicitTimeout = defaults.Approval

// allowPattern is one --allow-tool pattern: globs for the server and the
// tool.
type allowPattern struct{ server, tool string }

func parseAllowPatterns(ps []string) ([]allowPattern, error) {
	var out []allowPattern
	for _, p := range ps {
		srv, tool, ok := strings.Cut(p, ".")
		if !ok || srv == "" || tool == "" {
			return nil, fmt.Errorf("allowed tool pattern %q: want SERVER.TOOL, where each part may use * and ? globs (for example fs.read_* or github.*)", p)
		}
		for _, g := range []string{srv, tool} {
			if _, err := path.Match(g, ""); err != nil {
				return nil, fmt.Errorf("allowed tool pattern %q: %v", p, err)
			}
		}
		out = append(out, allowPattern{srv, tool})
	}
	return out, nil
}

func (s *Server) toolAllowed(server, tool string) bool {
	for _, p := range s.allow {
		ms, _ := path.Match(p.server, server)
		mt, _ := path.Match(p.tool, tool)
		if ms && mt {
			return true
		}
	}
	return false
}

// ApprovalMetaKey is the key, in the _meta of an approval's elicitation
// request, of what is asked in structured form, for programs such as the
// Python API: {"kind": "tool", "server": ..., "tool": ..., "args": {...}}
// or {"kind": "shell", "command": ...}. The message says the same for a
// person.
const ApprovalMetaKey = "ipybox/approval"

func approvalMeta(r *ipybox.ApprovalRequest) map[string]any {
	if r.Kind == ipybox.KindShell {
		return map[string]any{"kind": string(r.Kind), "command": r.Command}
	}
	args := r.Args
	if len(args) == 0 {
		args = json.RawMessage("{}")
	}
	return map[string]any{"kind": string(r.Kind), "server": r.Server, "tool": r.Tool, "args": args}
}

// approvalMessage is what the user sees when asked. Kernel code chose the
// command and the arguments: they are escaped, so that control characters
// and bidi overrides cannot hide what would run in the client's dialog.
//
// The terminal prompt of `ipybox exec --approval prompt` shows the same
// summary (internal/approvaltext): every line of a command numbered, runs
// of blank lines counted, and a long one's first and last lines with what
// is left out between, so that a line that runs cannot scroll out of view.
func approvalMessage(r *ipybox.ApprovalRequest) string {
	if r.Kind == ipybox.KindShell {
		return "ipybox: code run by the agent wants to run this shell command:\n\n" + approvaltext.Command(r.Command) + "\n\nAccept to run it, decline to refuse."
	}
	return fmt.Sprintf("ipybox: code run by the agent wants to call the MCP tool %s of server %s with these arguments:\n\n%s\n\nAccept to allow the call, decline to refuse it.",
		escape.Text(r.Tool), escape.Text(r.Server), approvaltext.Args(r.Args))
}

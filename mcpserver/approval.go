package mcpserver

import (
	"context"
	"encoding/json"
	"fmt"
	"path"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/ipybox/ipybox"
	"github.com/ipybox/ipybox/internal/approvaltext"
	"github.com/ipybox/ipybox/internal/defaults"
	"github.com/ipybox/ipybox/internal/escape"
)

// elicitTimeout bounds one approval question to the client; the executor's
// own approval timeout (5 minutes) bounds it too.
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

// decide answers an approval request of a cell run for session ss.
func (s *Server) decide(ctx context.Context, ss *mcp.ServerSession, r *ipybox.ApprovalRequest) {
	if s.opts.Approval != ApprovalElicit {
		r.Accept()
		return
	}
	if r.Kind == ipybox.KindTool && s.toolAllowed(r.Server, r.Tool) {
		r.Accept()
		return
	}
	if ip := ss.InitializeParams(); ip == nil || ip.Capabilities == nil || ip.Capabilities.Elicitation == nil {
		r.Reject("ipybox mcp runs with --approval elicit, but this MCP client does not support elicitation, so it cannot be asked and the call is rejected; " +
			"use a client with elicitation, or start ipybox mcp with --allow-tool SERVER.TOOL or --approval auto")
		return
	}
	// No longer than the request waits (the approval timeout, or the
	// cell's remaining time).
	deadline := r.Deadline
	if deadline.IsZero() {
		deadline = time.Now().Add(elicitTimeout)
	}
	ctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	res, err := ss.Elicit(ctx, &mcp.ElicitParams{
		Meta:            mcp.Meta{ApprovalMetaKey: approvalMeta(r)},
		Mode:            "form",
		Message:         approvalMessage(r),
		RequestedSchema: map[string]any{"type": "object", "properties": map[string]any{}},
	})
	switch {
	case err != nil && ctx.Err() != nil:
		// The request's own deadline: it times out by itself
		// (ApprovalTimeoutError in the cell).
	case err != nil:
		r.Reject("asking the MCP client for approval failed: " + err.Error())
	case res.Action == "accept":
		r.Accept()
	case res.Action == "decline":
		r.Reject("declined by the user")
	default:
		r.Reject("the user cancelled the approval request")
	}
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

package mcpserver

import (
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"slices"
	"strconv"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"

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

// selfAnswer is what the server decides without asking anyone:
// --approval auto, --allow-tool, and a client that cannot be asked
// (canElicit false; with the web page, it is asked instead). An ask rule
// of the approval policy asks whatever the mode, and whatever
// --allow-tool says: ask comes before allow. It reports whether it
// decided.
func (s *Server) selfAnswer(r *ipybox.ApprovalRequest, canElicit bool) (ipybox.Answer, bool) {
	if s.opts.Approvals.Mode != ApprovalElicit && !r.RuleAsks() {
		return ipybox.Answer{Accept: true, By: "default", Channel: "--approval auto"}, true
	}
	if r.Kind == "tool" && !r.RuleAsks() && s.toolAllowed(r.Server, r.Tool) {
		return ipybox.Answer{Accept: true, By: "default", Channel: "--allow-tool"}, true
	}
	if !canElicit {
		why := "ipybox mcp runs with --approval elicit, but this MCP client does not support elicitation, so it cannot be asked and the call is rejected; " +
			"use a client with elicitation, or start ipybox mcp with --allow-tool SERVER.TOOL or --approval auto (or --ui, and answer on its web page)"
		if s.opts.Approvals.Mode != ApprovalElicit {
			why = "an ask rule of the approval policy asks about this call, but this MCP client does not support elicitation, so the call is rejected (" + r.Why + ")"
		}
		return ipybox.Answer{Reason: why, By: "default", Channel: elicitChannel}, true
	}
	return ipybox.Answer{}, false
}

// question is the elicitation that asks the client about r, and the form
// that reads its answer. The client gets it as an input request of an
// input-required result (2026-07-28), or as an elicitation request (older
// clients; see mrtr.go).
func (s *Server) question(r *ipybox.ApprovalRequest) (*mcp.ElicitParams, *approvalForm) {
	form := newApprovalForm(r, s.opts.Approvals.Policy.File())
	return &mcp.ElicitParams{
		Meta:            mcp.Meta{approvalMetaKey: approvalMeta(r, form)},
		Mode:            "form",
		Message:         approvalMessage(r),
		RequestedSchema: form.schema(),
	}, form
}

// settle answers r with the client's reply to its question, and returns
// the answer.
func settle(r *ipybox.ApprovalRequest, form *approvalForm, res *mcp.ElicitResult, client string) (ipybox.Answer, error) {
	channel := elicitChannel
	if client != "" {
		// The client names itself: a claim, quoted as it came.
		channel += " (the client says it is " + strconv.QuoteToASCII(clipText(client, 80)) + ")"
	}
	return settleAs(r, form, res, "person", channel, "")
}

// settleAs answers r with a reply to its form, as by (the audit's "by")
// through channel, and returns the answer. An error wrapping
// ipybox.ErrNotPending says another channel answered first.
func settleAs(r *ipybox.ApprovalRequest, form *approvalForm, res *mcp.ElicitResult, by, channel, person string) (ipybox.Answer, error) {
	a := form.answer(res)
	if res.Action == "decline" {
		a.Reason = declineReason(res)
	}
	a.By, a.Channel, a.Person = by, channel, person
	err := r.Answer(a)
	if errors.Is(err, ipybox.ErrCannotRemember) {
		// A widened rule that does not match the call: this answer
		// counts once, and the refusal says why nothing was remembered.
		a.Remember, a.Rules = ipybox.RememberOnce, nil
		if !a.Accept {
			a.Reason += "; not remembered: " + err.Error()
		}
		err = r.Answer(a)
	}
	return a, err
}

// failAsk answers r when asking the client failed.
func failAsk(r *ipybox.ApprovalRequest, err error) {
	r.Answer(ipybox.Answer{Reason: "asking the MCP client for approval failed: " + err.Error(), By: "default", Channel: elicitChannel})
}

// elicitChannel names MCP elicitation in the audit log.
const elicitChannel = "MCP elicitation"

// The values of the approval form's "answer" field. The client's decline
// is a refusal, once.
const (
	answerAllow        = "allow"
	answerAllowSession = "allow-session"
	answerAllowAlways  = "allow-always"
	answerDenySession  = "deny-session"
	answerDenyAlways   = "deny-always"
)

// approvalForm is what an approval's elicitation asks: which answers it
// offers (those that can be remembered, as ipybox.ApprovalRequest.
// CanRemember says), and the rule that remembering writes, which the
// person may edit to widen it.
type approvalForm struct {
	answers []string
	titles  []string
	rule    string // the narrow rule, when there is exactly one
}

func newApprovalForm(r *ipybox.ApprovalRequest, file string) *approvalForm {
	f := &approvalForm{answers: []string{answerAllow}, titles: []string{"Allow this call, once"}}
	where := "the approval policy"
	if file != "" {
		where = file
	}
	for _, c := range []struct {
		value, title string
		accept       bool
		how          ipybox.Remember
	}{
		{answerAllowSession, "Allow calls like this for this session", true, ipybox.RememberSession},
		{answerAllowAlways, "Allow calls like this always (writes the rule into " + where + ")", true, ipybox.RememberAlways},
		{answerDenySession, "Refuse calls like this for this session", false, ipybox.RememberSession},
		{answerDenyAlways, "Refuse calls like this always (writes a deny rule into " + where + ")", false, ipybox.RememberAlways},
	} {
		if r.CanRemember(c.accept, c.how) == nil {
			f.answers = append(f.answers, c.value)
			f.titles = append(f.titles, c.title)
		}
	}
	if len(f.answers) > 1 {
		if rules, err := r.NarrowRules(); err == nil && len(rules) == 1 {
			f.rule = rules[0]
		}
	}
	return f
}

// schema is the form's requested schema. Without a policy it is empty:
// accept or decline, as before.
func (f *approvalForm) schema() map[string]any {
	props := map[string]any{}
	if len(f.answers) > 1 {
		props["answer"] = map[string]any{
			"type": "string", "title": "Answer",
			"description": "Decline refuses this call once. Calls \"like this\" are those the rule below matches.",
			"enum":        f.answers, "enumNames": f.titles, "default": answerAllow,
		}
	}
	if f.rule != "" {
		props["rule"] = map[string]any{
			"type": "string", "title": "Rule to remember",
			"description": "What an answer for this session or always remembers: as narrow as this call. Edit it to widen it (it must still match this call): tool SERVER.TOOL [ARG=GLOB ...], or shell COMMAND with a last * for any arguments.",
			"default":     f.rule,
		}
	}
	return map[string]any{"type": "object", "properties": props}
}

// answer reads the client's reply. A value the form did not offer is a
// refusal: the client is not trusted to invent answers.
func (f *approvalForm) answer(res *mcp.ElicitResult) ipybox.Answer {
	switch res.Action {
	case "accept":
	case "decline":
		return ipybox.Answer{Reason: "declined by the user"}
	default:
		return ipybox.Answer{Reason: "the user cancelled the approval request"}
	}
	choice, _ := res.Content["answer"].(string)
	if choice == "" {
		choice = answerAllow
	}
	if !slices.Contains(f.answers, choice) {
		return ipybox.Answer{Reason: fmt.Sprintf("the client answered %q, which the question did not offer", escape.Text(choice))}
	}
	a := ipybox.Answer{Accept: strings.HasPrefix(choice, "allow")}
	switch {
	case strings.HasSuffix(choice, "-session"):
		a.Remember = ipybox.RememberSession
	case strings.HasSuffix(choice, "-always"):
		a.Remember = ipybox.RememberAlways
	}
	if !a.Accept {
		a.Reason = "refused by the user"
	}
	if rule, _ := res.Content["rule"].(string); a.Remember != "" && rule != "" && rule != f.rule {
		for _, w := range []string{"allow ", "deny ", "ask "} {
			rule = strings.TrimPrefix(rule, w)
		}
		a.Rules = []string{rule}
	}
	return a
}

// approvalMetaKey is the key, in the _meta of an approval's elicitation
// request, of what is asked in structured form, for programs such as the
// Python API: {"kind": "tool", "server": ..., "tool": ..., "args": {...}}
// or {"kind": "shell", "command": ...}, with "why" (why it asks),
// "rule_asks" (an ask rule asked, whatever the mode), "answers" (the
// values the form's "answer" field offers) and "rule" (the narrow rule
// that remembering writes) when there is an approval policy.
// The message says the same for a person.
const approvalMetaKey = "ipybox/approval"

func approvalMeta(r *ipybox.ApprovalRequest, f *approvalForm) map[string]any {
	var m map[string]any
	if r.Kind == "shell" {
		m = map[string]any{"kind": string(r.Kind), "command": r.Command}
	} else {
		args := r.Args
		if len(args) == 0 {
			args = json.RawMessage("{}")
		}
		m = map[string]any{"kind": string(r.Kind), "server": r.Server, "tool": r.Tool, "args": args}
	}
	if r.Why != "" {
		m["why"] = r.Why
		m["rule_asks"] = r.RuleAsks()
		m["answers"] = f.answers
		if f.rule != "" {
			m["rule"] = f.rule
		}
	}
	return m
}

// approvalMessage is what the user sees when asked. Kernel code chose the
// command and the arguments: they are escaped, so that control characters
// and bidi overrides cannot hide what would run in the client's dialog.
//
// The terminal prompt of `ipybox exec --approval prompt` shows the same
// summary (internal/approvaltext): every line of a command numbered, runs
// of blank lines counted, and a long one's first and last lines with what
// is left out between, so that a line that runs cannot scroll out of view;
// then the same facts: why it asks, and what remembering writes.
func approvalMessage(r *ipybox.ApprovalRequest) string {
	var msg string
	if r.Kind == "shell" {
		msg = "ipybox: code run by the agent wants to run this shell command:\n\n" + approvaltext.Command(r.Command)
	} else {
		msg = fmt.Sprintf("ipybox: code run by the agent wants to call the MCP tool %s of server %s with these arguments:\n\n%s",
			escape.Text(r.Tool), escape.Text(r.Server), approvaltext.Args(r.Args))
	}
	if facts := r.Facts(); len(facts) > 0 {
		msg += "\n\n" + strings.Join(facts, "\n")
	}
	if r.Kind == "shell" {
		return msg + "\n\nAccept to run it, decline to refuse."
	}
	return msg + "\n\nAccept to allow the call, decline to refuse it."
}

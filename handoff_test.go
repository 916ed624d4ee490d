package ipybox

import (
	"testing"

	"github.com/ipybox/ipybox/internal/handoff"
	"github.com/ipybox/ipybox/internal/policy"
)

// TestHandoffSession: the Executor that replaces another in its session
// (mcpserver's reset by swap) decides by the answers remembered for the
// session, and names the session as the old one did.
func TestHandoffSession(t *testing.T) {
	rules, err := policy.Parse("", []byte("allow tool fs.read_file\n"))
	if err != nil {
		t.Fatal(err)
	}
	old := &Executor{session: "sess-old", sessRules: rules}
	fresh := &Executor{session: "sess-pooled"}
	call := &policy.Call{Kind: policy.KindTool, Server: "fs", Tool: "read_file"}
	if d := policy.Decide(call, fresh.sessRules); d.Action == policy.Allow {
		t.Fatalf("the pooled Executor allows before the handoff: %+v", d)
	}
	handoff.Session(old, fresh)
	if fresh.session != "sess-old" {
		t.Errorf("session name %q, want sess-old", fresh.session)
	}
	if d := policy.Decide(call, fresh.sessRules); d.Action != policy.Allow {
		t.Errorf("after the handoff: %+v, want the remembered allow", d)
	}
}

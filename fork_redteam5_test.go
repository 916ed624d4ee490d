//go:build linux

package ipybox_test

import (
	"strings"
	"testing"

	"github.com/ipybox/ipybox"
)

// TestRedteam5ForkApprovals: an answer remembered "for the session" is
// the session's, and a fork is a session of its own: it is asked again
// (nothing its source was granted carries over), and its audit rows name
// its own session. A rewind keeps the session, and its remembered
// answers with it.
func TestRedteam5ForkApprovals(t *testing.T) {
	p, _, log := newPolicy(t, "")
	src := start(t, &ipybox.Options{ApprovalPolicy: p, ApproveShellCommands: true, RewindDepth: 1})
	grant := func(r *ipybox.ApprovalRequest) {
		if err := r.Answer(ipybox.Answer{Accept: true, Remember: ipybox.RememberSession, By: "person", Channel: "test"}); err != nil {
			t.Errorf("Answer: %v", err)
		}
	}
	refuse := func(r *ipybox.ApprovalRequest) { r.Reject("not granted here") }
	if reqs, _, err := collect(t, src, "!echo granted", nil, grant); err != nil || len(reqs) != 1 {
		t.Fatalf("the source's first command: %v, %d requests", err, len(reqs))
	}
	if reqs, ev, err := collect(t, src, "!echo granted", nil, refuse); err != nil || len(reqs) != 0 || !strings.Contains(resultText(ev), "granted") {
		t.Fatalf("the source's remembered answer: %v, %d requests, %q", err, len(reqs), resultText(ev))
	}
	forks, err := src.Fork(t.Context(), 2, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range forks {
		defer f.Close()
	}
	for i, f := range forks {
		// Refused, the command raises in the cell (the Stream's error).
		reqs, ev, err := collect(t, f, "!echo granted", nil, refuse)
		if len(reqs) != 1 || err == nil || !strings.Contains(err.Error(), "not granted here") {
			t.Errorf("fork %d ran the source's granted command without being asked: %d requests, %v, %q", i, len(reqs), err, resultText(ev))
		}
		if f.SessionID() == src.SessionID() {
			t.Errorf("fork %d has its source's session id %s", i, f.SessionID())
		}
	}
	// The source's rewind keeps its session (and what it was granted).
	if _, err := src.Rewind(t.Context(), 1); err != nil {
		t.Fatal(err)
	}
	if reqs, _, err := collect(t, src, "!echo granted", nil, refuse); err != nil || len(reqs) != 0 {
		t.Errorf("the source after a rewind: %v, %d requests", err, len(reqs))
	}
	sessions := map[string]int{}
	for _, e := range readAudit(t, log) {
		sessions[e.Session]++
	}
	for i, f := range forks {
		if sessions[f.SessionID()] != 1 {
			t.Errorf("fork %d (%s): %d audit rows, want 1 (the refusal): %v", i, f.SessionID(), sessions[f.SessionID()], sessions)
		}
	}
}

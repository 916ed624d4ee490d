package ipybox

import "github.com/ipybox/ipybox/internal/handoff"

func init() {
	handoff.Session = func(from, to any) { to.(*Executor).takeSession(from.(*Executor)) }
}

// takeSession makes e, which no caller has used yet, old's successor in
// its session: the audit log and spans name old's session, and the
// answers remembered for it hold (handoff.Session).
func (e *Executor) takeSession(old *Executor) {
	old.sessMu.Lock()
	rules := old.sessRules
	old.sessMu.Unlock()
	e.sessMu.Lock()
	e.sessRules = rules
	e.sessMu.Unlock()
	e.session = old.session
}

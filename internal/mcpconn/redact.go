package mcpconn

import (
	"net/url"
	"strconv"
	"strings"
	"sync"
)

// Secrets from ${VAR} substitution must not leave mcpconn: a server URL
// with ?api_key=${KEY} that cannot be reached makes a transport error that
// quotes the expanded URL, and that error would reach kernel code (as a
// ToolError) and MCP clients. Every substituted value is remembered, and
// every error and log line mcpconn produces is scrubbed of it, in the
// spellings an error may use (as is, URL-encoded, Go-quoted).

// minSecret is the shortest substituted value that is scrubbed: shorter
// ones (a port, a flag) would wreck error texts and hide little.
const minSecret = 4

// redactedMark replaces a secret.
const redactedMark = "<redacted>"

// secretSet is the substituted values seen so far.
type secretSet struct {
	mu   sync.RWMutex
	vals map[string]bool
	list []string // every spelling, longest first
}

func (s *secretSet) add(values ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.vals == nil {
		s.vals = map[string]bool{}
	}
	changed := false
	for _, v := range values {
		if len(v) < minSecret {
			continue
		}
		q := strconv.Quote(v)
		for _, form := range []string{v, url.QueryEscape(v), url.PathEscape(v), q[1 : len(q)-1]} {
			if !s.vals[form] {
				s.vals[form] = true
				s.list = append(s.list, form)
				changed = true
			}
		}
	}
	if changed {
		// Longest first, so that a secret containing another is replaced
		// whole.
		list := s.list
		for i := 1; i < len(list); i++ {
			for j := i; j > 0 && len(list[j]) > len(list[j-1]); j-- {
				list[j], list[j-1] = list[j-1], list[j]
			}
		}
	}
}

// scrub returns text without any known secret.
func (s *secretSet) scrub(text string) string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	for _, v := range s.list {
		if strings.Contains(text, v) {
			text = strings.ReplaceAll(text, v, redactedMark)
		}
	}
	return text
}

// scrubErr returns err, or, when its text holds a secret, an error with
// the scrubbed text that still unwraps to err (errors.Is keeps working).
func (s *secretSet) scrubErr(err error) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	if clean := s.scrub(msg); clean != msg {
		return &redactedError{msg: clean, err: err}
	}
	return err
}

// redactedError is an error whose text had secrets removed.
type redactedError struct {
	msg string
	err error
}

func (e *redactedError) Error() string { return e.msg }
func (e *redactedError) Unwrap() error { return e.err }

// Redact returns text without the secrets that ${VAR} substitution puts
// into the configs of the registered servers (looked up now, as a
// connection would, so that a server not connected yet counts too), nor
// any OAuth token or client secret seen so far, each replaced by
// "<redacted>". The audit log of approvals passes the arguments of tool
// calls and shell commands through it.
func (m *Manager) Redact(text string) string {
	for _, name := range m.reg.Names() {
		if re, ok := m.reg.lookup(name); ok {
			_, values, _ := m.expand(re.cfg)
			m.secrets.add(values...)
		}
	}
	return m.secrets.scrub(text)
}

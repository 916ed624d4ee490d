package policy

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"
)

// maxNarrowArgs is the largest arguments a remembered rule repeats: a rule
// is one line of a file that people read.
const maxNarrowArgs = 8 << 10

// Narrow returns the match part of the rules that are as narrow as c: the
// same server, tool and arguments (args={...}), or, for a shell command,
// each of its simple commands with the same words. It fails, saying why,
// for a call that no rule can name exactly (a shell command with $(...),
// arguments with repeated keys or too long for one line).
func Narrow(c *Call) ([]string, error) {
	switch c.Kind {
	case KindTool:
		m, err := narrowTool(c)
		if err != nil {
			return nil, err
		}
		return []string{m}, nil
	case KindShell:
		sh := prepareShell(c.Command)
		if sh.notShell {
			return nil, errors.New("shell rules do not apply to scripts of other programs")
		}
		if !sh.plain {
			return nil, errors.New("no rule can name this command exactly: " + sh.why)
		}
		var out []string
		for _, cmd := range sh.plains {
			parts := []string{KindShell}
			for _, w := range cmd.words {
				s, ok := renderWord(w)
				if !ok {
					return nil, errors.New("a word of the command holds a control character")
				}
				parts = append(parts, s)
			}
			m := strings.Join(parts, " ")
			if !isPrintable(m) {
				return nil, errors.New("the command holds a control or bidirectional formatting character")
			}
			if !containsString(out, m) {
				out = append(out, m)
			}
		}
		return out, nil
	}
	return nil, fmt.Errorf("unknown kind %q", c.Kind)
}

func containsString(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

func narrowTool(c *Call) (string, error) {
	raw := c.Args
	if len(bytes.TrimSpace(raw)) == 0 {
		raw = []byte("{}")
	}
	if len(raw) > maxNarrowArgs {
		return "", fmt.Errorf("the arguments (%d bytes) are too long to write in a rule (at most %d)", len(raw), maxNarrowArgs)
	}
	if !utf8.Valid(raw) {
		return "", errors.New(argsUnreadable)
	}
	v, ok := decodeArgs(raw)
	if _, obj := v.(map[string]any); !ok || !obj {
		return "", errors.New(argsUnreadable)
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return "", err
	}
	return fmt.Sprintf("%s %s.%s args=%s", KindTool, nameToken(c.Server), nameToken(c.Tool), asciiJSON(strings.TrimSpace(b.String()))), nil
}

// nameToken writes a server or tool name as a rule token that matches it
// alone: as it is when it has only letters, digits, _ and -, else as a
// JSON string (ASCII only).
func nameToken(s string) string {
	safe := s != ""
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-') {
			safe = false
			break
		}
	}
	if safe {
		return s
	}
	b, _ := json.Marshal(s)
	return asciiJSON(string(b))
}

// asciiJSON escapes every non-ASCII character of JSON text (only strings
// hold any), so that a rule line shows no character that reads as
// another, and holds no line or paragraph separator.
func asciiJSON(s string) string {
	var b strings.Builder
	for _, r := range s {
		switch {
		case r < 0x80:
			b.WriteRune(r)
		case r <= 0xffff:
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			r -= 0x10000
			fmt.Fprintf(&b, `\u%04x\u%04x`, 0xd800+(r>>10), 0xdc00+(r&0x3ff))
		}
	}
	return b.String()
}

// Cover parses the match parts as rules with action and checks that,
// together, they decide c that way; they are what a person answering c
// remembers (as narrow as the call, or wider).
func Cover(c *Call, action Action, matches []string) ([]*Rule, error) {
	if len(matches) == 0 {
		return nil, errors.New("no rule to remember")
	}
	set := &Rules{}
	for _, m := range matches {
		if !isPrintable(m) || strings.ContainsAny(m, "\n\r") {
			return nil, fmt.Errorf("rule %q: one line without control characters", m)
		}
		r, err := ParseMatch(m)
		if err != nil {
			return nil, fmt.Errorf("rule %q: %v", m, err)
		}
		r.Action = action
		r.Principal = c.Principal
		r.ID = ruleID(r.String())
		set.add(r)
	}
	if d := Decide(c, set); d.Action != action {
		why := "it does not match the call"
		if d.NoAllow != "" {
			why += " (" + d.NoAllow + ")"
		}
		return nil, fmt.Errorf("%s %s: %s", action, strings.Join(matches, "; "), why)
	}
	return set.rules, nil
}

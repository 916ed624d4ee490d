package policy

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/ipybox/ipybox/internal/trusted"
)

// Decisions are the values Entry.Decision takes.
var Decisions = []string{"allow", "deny", "timeout", "abandoned"}

// Entry is one line of the audit log: one decision about one call.
type Entry struct {
	Time    time.Time `json:"time"`
	Session string    `json:"session,omitempty"`
	// Principal is whose session made the call (a principal of ipybox
	// mcp, as its token says); empty for a program without principals.
	Principal string `json:"principal,omitempty"`
	Kind      string `json:"kind"` // tool or shell
	Server    string `json:"server,omitempty"`
	Tool      string `json:"tool,omitempty"`
	// Args are the call's arguments, redacted: the values of argument
	// names that the policy's redact lines name, and every ${VAR} value
	// substituted into a server config, are replaced by "<redacted>".
	// Arguments too long to log are left out; ArgsNote then says how
	// long they were, with their SHA-256.
	Args     json.RawMessage `json:"args,omitempty"`
	ArgsNote string          `json:"args_note,omitempty"`
	Command  string          `json:"command,omitempty"`
	// Decision is allow, deny, timeout (nobody decided in time) or
	// abandoned (the cell ended, or the kernel gave up, first): one of
	// Decisions.
	Decision string `json:"decision"`
	// By says who decided: "rule" (a rule of the policy file), "session"
	// (an answer remembered for the session), "person" (someone asked
	// through Channel), "application" (the program embedding ipybox),
	// "default" (no rule matched and the mode's default applied, as
	// Channel says), or "nobody" (timeout, abandoned).
	By      string   `json:"by"`
	Rule    *RuleRef `json:"rule,omitempty"`
	Channel string   `json:"channel,omitempty"`
	Person  string   `json:"person,omitempty"`
	// Asked is why a person or the application was asked: the ask rule,
	// or that no rule matched.
	Asked string `json:"asked,omitempty"`
	// Remember is how long the answer counts (session, always) when it
	// was remembered, and Remembered the rules it added.
	Remember   string   `json:"remember,omitempty"`
	Remembered []string `json:"remembered,omitempty"`
	Reason     string   `json:"reason,omitempty"`
	WaitedMS   float64  `json:"waited_ms"`
}

// RuleRef names the rule that decided.
type RuleRef struct {
	ID   string `json:"id"`
	Text string `json:"text"`
	File string `json:"file,omitempty"`
	Line int    `json:"line,omitempty"`
}

// Ref returns a reference to r for the log.
func Ref(r *Rule) *RuleRef {
	if r == nil {
		return nil
	}
	return &RuleRef{ID: r.ID, Text: r.String(), File: r.File, Line: r.Line}
}

// DefaultMaxLogBytes is when the log is rotated: it becomes <name>.1
// (replacing the one before) and a new one is started. Kernel code can
// make calls as fast as they are denied, so the log is bounded.
//
// The log is shared by the principals of ipybox mcp, so rotation is fair
// (rotate): the rows of the <name>.1 it replaces are kept, newest first, up
// to a quarter of maxBytes for each principal, less what that principal
// has in the file being rotated. One principal's flood of denials then
// drops its own older rows, never another's: a row goes only when its own
// principal has written a quarter of the log since (acc3, attack 12).
// <name>.1 holds at most maxBytes plus a quarter of it for each principal.
const DefaultMaxLogBytes = 64 << 20

// maxLoggedArgs and maxLoggedCommand bound what one entry repeats.
const (
	maxLoggedArgs    = 64 << 10
	maxLoggedCommand = 64 << 10
)

// Log is the audit log: JSON lines appended to a host file (mode 0600),
// by any number of ipybox processes at once (each line is one write to a
// file opened for appending).
type Log struct {
	path string
	max  int64

	mu     sync.Mutex
	f      *os.File
	closed bool
	// created, set by OpenLogOnWrite, is told the path when the first
	// entry creates the file.
	created func(path string)
}

// OpenLog opens (or creates) the audit log at path. maxBytes bounds it
// before rotation; 0 means DefaultMaxLogBytes.
func OpenLog(path string, maxBytes int64) (*Log, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, err
	}
	if maxBytes <= 0 {
		maxBytes = DefaultMaxLogBytes
	}
	if _, err := trusted.Check("approval log", abs, false); err != nil {
		return nil, err
	}
	l := &Log{path: RealPath(abs), max: maxBytes}
	if err := l.open(); err != nil {
		return nil, err
	}
	return l, nil
}

// OpenLogOnWrite is OpenLog that opens (and creates) the file only when
// the first entry is written, and then, when it had to create it, tells
// created its path (nil: nobody). A run that decides nothing leaves no
// file, nor folder.
func OpenLogOnWrite(path string, maxBytes int64, created func(path string)) (*Log, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, err
	}
	if maxBytes <= 0 {
		maxBytes = DefaultMaxLogBytes
	}
	if created == nil {
		created = func(string) {}
	}
	return &Log{path: RealPath(abs), max: maxBytes, created: created}, nil
}

// Path returns the log's path, links resolved.
func (l *Log) Path() string { return l.path }

func (l *Log) open() error {
	if err := os.MkdirAll(filepath.Dir(l.path), 0o700); err != nil {
		return fmt.Errorf("approval log: %w", err)
	}
	f, err := os.OpenFile(l.path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("approval log: %w", err)
	}
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		f.Close()
		return fmt.Errorf("approval log %s is not a regular file", l.path)
	}
	l.f = f
	return nil
}

// Write appends e as one line.
func (l *Log) Write(e *Entry) error {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf) // one line, ending in a newline
	enc.SetEscapeHTML(false)
	if err := enc.Encode(e); err != nil {
		return err
	}
	line := buf.Bytes()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return errors.New("approval log: closed")
	}
	if l.f == nil {
		// OpenLogOnWrite: the first entry.
		_, statErr := os.Lstat(l.path)
		if err := l.open(); err != nil {
			return err
		}
		if errors.Is(statErr, fs.ErrNotExist) {
			l.created(l.path)
		}
	}
	// Another process may have rotated it: follow the name.
	cur, err1 := l.f.Stat()
	now, err2 := os.Stat(l.path)
	if err1 != nil || err2 != nil || !os.SameFile(cur, now) {
		l.f.Close()
		if err := l.open(); err != nil {
			return err
		}
		cur, _ = l.f.Stat()
	}
	if cur != nil && cur.Size()+int64(len(line)) > l.max && cur.Size() > 0 {
		if err := l.rotate(); err != nil {
			return err
		}
		l.f.Close()
		if err := l.open(); err != nil {
			return err
		}
	}
	_, err := l.f.Write(line)
	return err
}

// rotate makes the current file <path>.1, keeping the rows of the <path>.1
// it replaces that DefaultMaxLogBytes says (a quarter of max for each
// principal, less its rows in the current file, newest first), before the
// current file's rows. The current file is first renamed aside, so that
// other processes' writers start a new one; a row another process appends
// to it while it is copied is copied too.
func (l *Log) rotate() error {
	aside := fmt.Sprintf("%s.rotating-%d-%d", l.path, os.Getpid(), time.Now().UnixNano())
	if err := os.Rename(l.path, aside); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil // another process rotated it
		}
		return fmt.Errorf("approval log: rotate: %w", err)
	}
	defer os.Remove(aside)
	cur, err := os.ReadFile(aside)
	if err != nil {
		return fmt.Errorf("approval log: rotate: %w", err)
	}
	old, err := os.ReadFile(l.path + ".1")
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("approval log: rotate: %w", err)
	}
	keep := keptRows(old, cur, l.max/4)
	tmp, err := os.CreateTemp(filepath.Dir(l.path), "."+filepath.Base(l.path)+".1.*")
	if err != nil {
		return fmt.Errorf("approval log: rotate: %w", err)
	}
	defer os.Remove(tmp.Name())
	for _, b := range [][]byte{keep, cur} {
		if _, err := tmp.Write(b); err != nil {
			tmp.Close()
			return fmt.Errorf("approval log: rotate: %w", err)
		}
	}
	// A writer of another process that checked the name before it was
	// renamed may have appended since it was read.
	if late, err := os.ReadFile(aside); err == nil && len(late) > len(cur) {
		tmp.Write(late[len(cur):])
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("approval log: rotate: %w", err)
	}
	if err := os.Rename(tmp.Name(), l.path+".1"); err != nil {
		return fmt.Errorf("approval log: rotate: %w", err)
	}
	return nil
}

// keptRows returns the rows of old (whole lines, in their order) that a
// rotation keeps: for each principal, its newest rows up to share bytes
// less what it has in cur. A line that is not an entry has the principal
// "" (that of a program without principals).
func keptRows(old, cur []byte, share int64) []byte {
	if len(old) == 0 {
		return nil
	}
	principal := func(line []byte) string {
		var e struct {
			Principal string `json:"principal"`
		}
		json.Unmarshal(line, &e)
		return e.Principal
	}
	room := map[string]int64{}
	left := func(p string) int64 {
		if n, ok := room[p]; ok {
			return n
		}
		return share
	}
	for _, line := range bytes.SplitAfter(cur, []byte("\n")) {
		if len(line) > 0 {
			p := principal(line)
			room[p] = left(p) - int64(len(line))
		}
	}
	lines := bytes.SplitAfter(old, []byte("\n"))
	kept := make([]bool, len(lines))
	for i := len(lines) - 1; i >= 0; i-- {
		line := lines[i]
		if len(line) == 0 || line[len(line)-1] != '\n' {
			continue // a line cut short
		}
		p := principal(line)
		if n := left(p); n >= int64(len(line)) {
			room[p] = n - int64(len(line))
			kept[i] = true
		} else {
			room[p] = 0
		}
	}
	var out []byte
	for i, line := range lines {
		if kept[i] {
			out = append(out, line...)
		}
	}
	return out
}

// Close closes the log. It is idempotent.
func (l *Log) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil
	}
	l.closed = true
	if l.f == nil {
		return nil
	}
	return l.f.Close()
}

// ReadLog returns the entries of the log at path, oldest first, the
// rotated file's before the current one's. Lines that are not entries
// (a line cut short by a crash) are skipped and counted.
func ReadLog(path string) (entries []Entry, skipped int, err error) {
	skipped, err = ScanLog(path, func(e *Entry) { entries = append(entries, *e) })
	if err != nil {
		return nil, 0, err
	}
	return entries, skipped, nil
}

// ScanLog calls fn with each entry of the log at path, oldest first, as
// ReadLog returns them, holding one at a time: a reader that keeps a few
// does not hold the whole log (its rotated file, DefaultMaxLogBytes). fn must
// not keep e, which the next entry reuses; a copy of *e it may keep.
func ScanLog(path string, fn func(e *Entry)) (skipped int, err error) {
	found := false
	for _, p := range []string{path + ".1", path} {
		f, err := os.Open(p)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return 0, err
		}
		found = true
		sc := bufio.NewScanner(f)
		sc.Buffer(nil, 4<<20)
		for sc.Scan() {
			var e Entry
			if json.Unmarshal(sc.Bytes(), &e) != nil || e.Decision == "" {
				skipped++
				continue
			}
			fn(&e)
		}
		err = sc.Err()
		f.Close()
		if err != nil {
			return 0, fmt.Errorf("%s: %w", p, err)
		}
	}
	if !found {
		return 0, fmt.Errorf("no approval log at %s yet", path)
	}
	return skipped, nil
}

// Redacted is the redaction mark.
const Redacted = "<redacted>"

// RedactArgs returns raw for the log: the values of argument names that
// match fields (globs, at any depth) replaced by Redacted, then scrub
// applied to the text (it removes secrets; nil: none). Arguments too long
// to log, or that are not JSON, are left out, and note says so.
func RedactArgs(raw []byte, fields []string, scrub func(string) string) (json.RawMessage, string) {
	if len(bytes.TrimSpace(raw)) == 0 {
		return nil, ""
	}
	sum := sha256.Sum256(raw)
	digest := hex.EncodeToString(sum[:8])
	if len(raw) > maxLoggedArgs {
		return nil, fmt.Sprintf("%d bytes, not logged (sha256 %s…)", len(raw), digest)
	}
	v, ok := decodeArgs(raw)
	if !ok {
		return nil, fmt.Sprintf("%d bytes, not one JSON value without repeated keys; not logged (sha256 %s…)", len(raw), digest)
	}
	v = redactValue(v, fields)
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, "not logged: " + err.Error()
	}
	text := bytes.TrimSpace(b.Bytes())
	if scrub != nil {
		s := scrub(string(text))
		if !json.Valid([]byte(s)) {
			return nil, fmt.Sprintf("%d bytes, not logged: they hold a secret that could not be cut out cleanly (sha256 %s…)", len(raw), digest)
		}
		text = []byte(s)
	}
	return json.RawMessage(text), ""
}

func redactValue(v any, fields []string) any {
	switch x := v.(type) {
	case map[string]any:
		for k, val := range x {
			hit := false
			for _, f := range fields {
				if globMatch(f, k) {
					hit = true
					break
				}
			}
			if hit {
				x[k] = Redacted
			} else {
				x[k] = redactValue(val, fields)
			}
		}
	case []any:
		for i := range x {
			x[i] = redactValue(x[i], fields)
		}
	}
	return v
}

// RedactCommand returns a shell command for the log: scrubbed of secrets,
// and its head and tail when it is too long.
func RedactCommand(cmd string, scrub func(string) string) string {
	// Scrubbed first: a cut could split a secret and leave half of it.
	if scrub != nil {
		cmd = scrub(cmd)
	}
	if len(cmd) > maxLoggedCommand {
		sum := sha256.Sum256([]byte(cmd))
		cmd = fmt.Sprintf("%s[... %d bytes not logged (sha256 %s…) ...]%s", cmd[:maxLoggedCommand/2], len(cmd)-maxLoggedCommand, hex.EncodeToString(sum[:8]), cmd[len(cmd)-maxLoggedCommand/2:])
	}
	return cmd
}

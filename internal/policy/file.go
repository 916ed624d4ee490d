package policy

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ipybox/ipybox/internal/flock"
	"github.com/ipybox/ipybox/internal/trusted"
)

// File is a policy file on the host. Its rules are read again whenever the
// file changes (another inode, size or modification time; checked at each
// decision, a stat), so that a rule removed by `ipybox approvals revoke`,
// or by hand, stops applying to running sessions at their next call.
// Changes ipybox makes (remembered answers, revokes) replace the file
// atomically, under a lock that every ipybox process takes.
type File struct {
	path string

	mu    sync.Mutex
	rules *Rules
	err   error // the last read failed: the file is malformed or unreadable
	info  fs.FileInfo
}

// lockWait bounds the wait for another process's change of the file.
const lockWait = 5 * time.Second

// RememberedMark starts the comment ipybox writes above a remembered rule;
// revoking the rule removes the comment too.
const RememberedMark = "# remembered "

// Open reads the policy file at path. A file that does not exist yet is
// an empty policy (a remembered answer creates it); a malformed one is an
// error that names the file and the line.
func Open(path string) (*File, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, err
	}
	// Its rules decide what runs without asking: the file must be this
	// user's alone (internal/trusted).
	if _, err := trusted.Check("approval policy", abs, false); err != nil {
		return nil, err
	}
	f := &File{path: RealPath(abs)}
	if err := f.reload(); err != nil {
		return nil, err
	}
	return f, nil
}

// Path returns the file's path, links resolved.
func (f *File) Path() string { return f.path }

// RealPath resolves the links of the longest existing prefix of p.
func RealPath(p string) string {
	p = filepath.Clean(p)
	rest := ""
	for {
		if r, err := filepath.EvalSymlinks(p); err == nil {
			return filepath.Join(r, rest)
		}
		parent := filepath.Dir(p)
		if parent == p {
			return filepath.Join(p, rest)
		}
		rest = filepath.Join(filepath.Base(p), rest)
		p = parent
	}
}

// reload reads the file if it changed since the last read. f.mu is held
// by the caller, or f is new.
func (f *File) reload() error {
	fi, err := os.Stat(f.path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if f.info == nil && f.rules != nil && f.err == nil {
			return nil
		}
		f.info, f.rules, f.err = nil, &Rules{}, nil
		return nil
	case err != nil:
		f.err = fmt.Errorf("approval policy: %w", err)
		return f.err
	case !fi.Mode().IsRegular():
		f.err = fmt.Errorf("approval policy %s is not a regular file", f.path)
		return f.err
	}
	if f.info != nil && f.err == nil && os.SameFile(f.info, fi) && f.info.Size() == fi.Size() && f.info.ModTime().Equal(fi.ModTime()) && f.info.Mode() == fi.Mode() {
		return nil
	}
	// A file that changed (or changed mode) is trusted again only if it
	// is still this user's alone.
	if _, err := trusted.Check("approval policy", f.path, false); err != nil {
		f.err = err
		return f.err
	}
	data, err := os.ReadFile(f.path)
	if err != nil {
		f.err = fmt.Errorf("approval policy: %w", err)
		return f.err
	}
	rs, err := Parse(f.path, data)
	if err != nil {
		f.err = fmt.Errorf("approval policy: %w", err)
		return f.err
	}
	f.info, f.rules, f.err = fi, rs, nil
	return nil
}

// Rules returns the file's rules as they are now. An error means the file
// became malformed or unreadable since it was opened: no rule of it can
// be trusted until it is fixed.
func (f *File) Rules() (*Rules, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.reload(); err != nil {
		return nil, err
	}
	return f.rules, nil
}

// Append adds rules (whole lines: "allow tool ...") at the end of the
// file, after a comment line (without its "# remembered " mark), and
// returns them as parsed. The file is created when missing (mode 0600, in
// a folder of mode 0700).
func (f *File) Append(comment string, lines ...string) ([]*Rule, error) {
	var added []*Rule
	err := f.rewrite(func(old []byte, rs *Rules) ([]byte, error) {
		var b strings.Builder
		b.Write(old)
		if len(old) > 0 && old[len(old)-1] != '\n' {
			b.WriteByte('\n')
		}
		if comment != "" {
			b.WriteString(RememberedMark + strings.NewReplacer("\n", " ", "\r", " ").Replace(comment) + "\n")
		}
		first := strings.Count(b.String(), "\n") + 1
		for i, l := range lines {
			if strings.ContainsAny(l, "\n\r") {
				return nil, fmt.Errorf("rule %q: one line", l)
			}
			r, _, err := parseLine(l)
			if err != nil || r == nil {
				return nil, fmt.Errorf("rule %q: %v", l, err)
			}
			r.File, r.Line = f.path, first+i
			added = append(added, r)
			b.WriteString(l + "\n")
		}
		return []byte(b.String()), nil
	})
	return added, err
}

// Remove deletes the rules that id names, an ID as `ipybox approvals
// rules` shows it or a line number, with the "# remembered" comment right
// above each, and returns them.
func (f *File) Remove(id string) ([]*Rule, error) {
	var removed []*Rule
	err := f.rewrite(func(old []byte, rs *Rules) ([]byte, error) {
		line, _ := strconv.Atoi(id)
		drop := map[int]bool{}
		for _, r := range rs.All() {
			if r.ID == id || r.Line == line {
				removed = append(removed, r)
				drop[r.Line] = true
			}
		}
		if len(removed) == 0 {
			return nil, fmt.Errorf("no rule %q in %s (`ipybox approvals rules` lists them with their IDs)", id, f.path)
		}
		lines := strings.SplitAfter(string(old), "\n")
		var b strings.Builder
		for i, l := range lines {
			n := i + 1
			if drop[n] || drop[n+1] && strings.HasPrefix(strings.TrimSpace(l), RememberedMark) {
				continue
			}
			b.WriteString(l)
		}
		return []byte(b.String()), nil
	})
	return removed, err
}

// rewrite changes the file under the lock: edit gets its content and
// rules as they are now (it refuses a malformed file) and returns the new
// content, which must parse; it replaces the file atomically.
func (f *File) rewrite(edit func(old []byte, rs *Rules) ([]byte, error)) error {
	dir := filepath.Dir(f.path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("approval policy: %w", err)
	}
	lk, err := os.OpenFile(filepath.Join(dir, "."+filepath.Base(f.path)+".lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return fmt.Errorf("approval policy: %w", err)
	}
	defer lk.Close()
	if err := flock.Lock(context.Background(), lk, true, lockWait); err != nil { // bound: lockWait
		return fmt.Errorf("approval policy: %w", err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	old, err := os.ReadFile(f.path)
	mode := fs.FileMode(0o600)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		old = nil
	case err != nil:
		return fmt.Errorf("approval policy: %w", err)
	default:
		if fi, err := os.Stat(f.path); err == nil {
			mode = fi.Mode().Perm()
		}
	}
	rs, err := Parse(f.path, old)
	if err != nil {
		return fmt.Errorf("approval policy: fix it first: %w", err)
	}
	data, err := edit(old, rs)
	if err != nil {
		return fmt.Errorf("approval policy: %w", err)
	}
	if _, err := Parse(f.path, data); err != nil {
		return fmt.Errorf("approval policy: the change would break it: %w", err)
	}
	if err := writeAtomic(f.path, data, mode); err != nil {
		return fmt.Errorf("approval policy: %w", err)
	}
	f.info = nil // read it again at the next decision
	return f.reload()
}

// writeAtomic replaces path with data: a temporary file in the same
// folder, synced, then renamed over it.
func writeAtomic(path string, data []byte, mode fs.FileMode) error {
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	name := tmp.Name()
	defer os.Remove(name) // after a successful rename, there is nothing there
	if err := tmp.Chmod(mode); err != nil {
		tmp.Close()
		return err
	}
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(name, path); err != nil {
		return err
	}
	if d, err := os.Open(dir); err == nil {
		d.Sync()
		d.Close()
	}
	return nil
}

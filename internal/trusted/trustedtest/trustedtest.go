//go:build !windows

// Package trustedtest builds the attack table of internal/trusted for the
// tests of every place that opens a file or folder ipybox trusts: the same
// variants, tried on the real CLI and server paths.
package trustedtest

import (
	"os"
	"path/filepath"
	"testing"
)

// Outcome is what the check must do with a variant.
type Outcome int

const (
	Accept Outcome = iota
	Warn           // accepted, with a warning (a secret others can read)
	Refuse
)

// Variant is one file or folder to try.
type Variant struct {
	Name string
	Path string
	Want Outcome
	// Fix is a text the refusal must hold ("chmod go-w", "chown").
	Fix string
	// Missing is set when Path does not exist (only places that create
	// what is missing take it).
	Missing bool
}

// Other is the uid of another user (nobody).
const Other = 65534

// Variants makes each variant under a fresh folder: a file with content
// (or, for dir, a folder). secret says whether a file that others can read
// is warned about. The variants that need another user's files are left
// out (and said so with t.Log) unless the test runs as root.
func Variants(t *testing.T, dir bool, secret bool, content []byte) []Variant {
	t.Helper()
	root := os.Geteuid() == 0
	if !root {
		t.Log("not root: the variants owned by another user are left out")
	}
	base := t.TempDir()
	n := 0
	folder := func(mode os.FileMode) string {
		n++
		d := filepath.Join(base, "v"+string(rune('a'+n)))
		must(t, os.Mkdir(d, 0o700))
		must(t, chmod(d, mode))
		return d
	}
	make1 := func(in string, mode os.FileMode) string {
		p := filepath.Join(in, "target")
		if dir {
			must(t, os.Mkdir(p, 0o700))
		} else {
			must(t, os.WriteFile(p, content, 0o600))
		}
		must(t, chmod(p, mode))
		return p
	}
	mode := func(file, folder os.FileMode) os.FileMode {
		if dir {
			return folder
		}
		return file
	}
	var out []Variant
	add := func(v Variant) { out = append(out, v) }
	add(Variant{Name: "ours, private", Path: make1(folder(0o700), mode(0o600, 0o700)), Want: Accept})
	readable := Accept
	if secret && !dir {
		readable = Warn
	}
	add(Variant{Name: "ours, others may read", Path: make1(folder(0o755), mode(0o644, 0o755)), Want: readable})
	add(Variant{Name: "in a sticky folder others may write (as /tmp)", Path: make1(folder(0o1777), mode(0o600, 0o700)), Want: Accept})
	add(Variant{Name: "others may write", Path: make1(folder(0o700), mode(0o666, 0o777)), Want: Refuse, Fix: "chmod go-w"})
	add(Variant{Name: "group may write", Path: make1(folder(0o700), mode(0o664, 0o775)), Want: Refuse, Fix: "chmod go-w"})
	add(Variant{Name: "others may write, not read", Path: make1(folder(0o700), mode(0o602, 0o703)), Want: Refuse, Fix: "chmod go-w"})
	if dir {
		add(Variant{Name: "sticky, others may write", Path: make1(folder(0o700), 0o1777), Want: Refuse, Fix: "chmod go-w"})
	}
	add(Variant{Name: "the folder above: others may write", Path: make1(folder(0o777), mode(0o600, 0o700)), Want: Refuse, Fix: "chmod go-w"})
	two := folder(0o777)
	mid := filepath.Join(two, "mid")
	must(t, os.Mkdir(mid, 0o700))
	add(Variant{Name: "two folders above: others may write", Path: make1(mid, mode(0o600, 0o700)), Want: Refuse, Fix: "chmod go-w"})
	link := filepath.Join(folder(0o700), "link")
	must(t, os.Symlink(make1(folder(0o777), mode(0o600, 0o700)), link))
	add(Variant{Name: "a link to a folder others may write", Path: link, Want: Refuse, Fix: "chmod go-w"})
	add(Variant{Name: "missing, in a folder others may write", Path: filepath.Join(folder(0o777), "new"), Want: Refuse, Fix: "chmod go-w", Missing: true})
	add(Variant{Name: "missing, in our folder", Path: filepath.Join(folder(0o700), "new"), Want: Accept, Missing: true})
	if root {
		p := make1(folder(0o700), mode(0o600, 0o700))
		must(t, os.Chown(p, Other, Other))
		add(Variant{Name: "another user's", Path: p, Want: Refuse, Fix: "chown"})
		up := folder(0o755)
		p = make1(up, mode(0o600, 0o700))
		must(t, os.Chown(up, Other, Other))
		add(Variant{Name: "the folder above is another user's", Path: p, Want: Refuse, Fix: "chown"})
		up = folder(0o755)
		must(t, os.Chown(up, Other, Other))
		add(Variant{Name: "missing, in another user's folder", Path: filepath.Join(up, "new"), Want: Refuse, Fix: "chown", Missing: true})
	}
	return out
}

// chmod is os.Chmod with 0o1000 read as the sticky bit, as chmod(1) reads it.
func chmod(p string, m os.FileMode) error {
	if m&0o1000 != 0 {
		m = m&^0o1000 | os.ModeSticky
	}
	return os.Chmod(p, m)
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

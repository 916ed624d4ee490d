package safefs

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/ipybox/ipybox/internal/testenv/ci"
)

// plant makes a base directory with a secret outside it and links to it:
// base/link -> outside file, base/dirlink -> outside dir, base/inner ->
// base/real (a link that stays inside).
func plant(t *testing.T) (base, outside string) {
	t.Helper()
	root := t.TempDir()
	base = filepath.Join(root, "base")
	outside = filepath.Join(root, "outside")
	for _, d := range []string{base, outside, filepath.Join(base, "real")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.WriteFile(filepath.Join(outside, "secret"), []byte("secret"), 0o600))
	must(os.Symlink(filepath.Join(outside, "secret"), filepath.Join(base, "link")))
	must(os.Symlink(outside, filepath.Join(base, "dirlink")))
	must(os.Symlink("real", filepath.Join(base, "inner")))
	must(os.Symlink("missing-target", filepath.Join(base, "dangling")))
	return base, outside
}

func TestRefusesLinks(t *testing.T) {
	base, outside := plant(t)
	cases := []struct {
		name string
		op   func() error
		want error
	}{
		{"open link to outside file", func() error {
			_, err := OpenFile(base, "link", os.O_RDONLY, 0)
			return err
		}, ErrSymlink},
		{"write through link", func() error {
			_, err := OpenFile(base, "link", os.O_WRONLY|os.O_TRUNC, 0)
			return err
		}, ErrSymlink},
		{"create under a dir link", func() error {
			_, err := CreateExclusive(base, "dirlink/new", 0o644)
			return err
		}, ErrSymlink},
		{"create under an inside link", func() error {
			_, err := CreateExclusive(base, "inner/new", 0o644)
			return err
		}, ErrSymlink},
		{"create at a dangling link", func() error {
			_, err := OpenFile(base, "dangling", os.O_WRONLY|os.O_CREATE, 0o644)
			return err
		}, ErrSymlink},
		{"exclusive create at a dangling link", func() error {
			_, err := CreateExclusive(base, "dangling", 0o644)
			return err
		}, fs.ErrExist},
		{"mkdir through a dir link", func() error { return MkdirAll(base, "dirlink/a/b", 0o755) }, ErrSymlink},
		{"mkdir over a file link", func() error { return MkdirAll(base, "link", 0o755) }, ErrSymlink},
		{"write file under a dir link", func() error { return WriteFile(base, "dirlink/x", []byte("x"), 0o644) }, ErrSymlink},
		{"read through link", func() error {
			_, err := ReadFile(base, "link", 0)
			return err
		}, ErrSymlink},
		{"dot dot", func() error {
			_, err := OpenFile(base, "../outside/secret", os.O_RDONLY, 0)
			return err
		}, ErrEscape},
		{"absolute", func() error {
			_, err := OpenFile(base, filepath.Join(outside, "secret"), os.O_RDONLY, 0)
			return err
		}, ErrEscape},
		{"remove under a dir link", func() error { return Remove(base, "dirlink/secret") }, ErrSymlink},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := c.op()
			if !errors.Is(err, c.want) {
				t.Fatalf("got %v, want %v", err, c.want)
			}
		})
	}
	b, err := os.ReadFile(filepath.Join(outside, "secret"))
	if err != nil || string(b) != "secret" {
		t.Fatalf("the outside file changed: %q %v", b, err)
	}
	if ents, _ := os.ReadDir(outside); len(ents) != 1 {
		t.Fatalf("something was created outside: %v", ents)
	}
}

func TestWriteFileReplacesALinkInsteadOfFollowingIt(t *testing.T) {
	base, outside := plant(t)
	if err := WriteFile(base, "link", []byte("new"), 0o644); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Lstat(filepath.Join(base, "link"))
	if err != nil || !fi.Mode().IsRegular() {
		t.Fatalf("link was not replaced by a file: %v %v", fi, err)
	}
	if b, _ := os.ReadFile(filepath.Join(outside, "secret")); string(b) != "secret" {
		t.Fatalf("the link's target was written: %q", b)
	}
}

func TestRemoveRemovesTheLinkNotItsTarget(t *testing.T) {
	base, outside := plant(t)
	if err := Remove(base, "link"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(outside, "secret")); err != nil {
		t.Fatalf("target gone: %v", err)
	}
}

func TestOrdinaryUse(t *testing.T) {
	base := t.TempDir()
	if err := MkdirAll(base, "a/b/c", 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := CreateExclusive(base, "a/b/c/f.png", 0o644)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString("png")
	f.Close()
	if _, err := CreateExclusive(base, "a/b/c/f.png", 0o644); !errors.Is(err, fs.ErrExist) {
		t.Fatalf("second exclusive create: got %v, want ErrExist", err)
	}
	if err := WriteFile(base, "x/y.json", []byte("{}"), 0o600); err != nil {
		t.Fatal(err)
	}
	b, err := ReadFile(base, "x/y.json", 10)
	if err != nil || string(b) != "{}" {
		t.Fatalf("ReadFile: %q %v", b, err)
	}
	if _, err := ReadFile(base, "a/b/c/f.png", 2); err == nil {
		t.Fatal("ReadFile over the limit: want an error")
	}
	if fi, _ := os.Stat(filepath.Join(base, "x/y.json")); fi.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v, want 0600", fi.Mode().Perm())
	}
	ents, _ := os.ReadDir(filepath.Join(base, "x"))
	if len(ents) != 1 {
		t.Fatalf("temporary files left: %v", ents)
	}
}

func TestReadRefusesAFIFOWithoutHanging(t *testing.T) {
	base := t.TempDir()
	if err := mkfifo(filepath.Join(base, "fifo")); err != nil {
		ci.Missing(t, "mkfifo: %v", err)
	}
	if _, err := ReadFile(base, "fifo", 0); err == nil {
		t.Fatal("want an error for a FIFO")
	}
}

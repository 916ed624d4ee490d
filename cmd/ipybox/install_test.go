package main

import (
	"archive/zip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ipybox/ipybox/internal/testenv"
)

const modulePath = "github.com/ipybox/ipybox"

// TestGoInstallLatest runs `go install github.com/ipybox/ipybox/cmd/ipybox@latest`,
// as the README tells users, against a module proxy on disk that serves
// this work tree as the module's newest (untagged, so pseudo-)version. It
// fails if go.mod grows a replace directive or a dependency that only
// resolves inside this repository, and checks that `ipybox version` of
// the installed binary names the commit (from its pseudo-version: a module
// built from a zip has no VCS information).
func TestGoInstallLatest(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("tier 4 test: skipped with -short")
	}
	git := testenv.NeedsTool(t, "git")
	goBin := testenv.NeedsTool(t, "go")
	root := testenv.RepoRoot(t)
	out, err := exec.Command(git, "-C", root, "rev-parse", "--short=12", "HEAD").Output()
	if err != nil {
		testenv.Missing(t, "not a git checkout: %v", err)
	}
	rev := strings.TrimSpace(string(out))
	ver := "v0.0.0-" + time.Now().UTC().Format("20060102150405") + "-" + rev

	// The files a commit of this work tree would hold: tracked and new,
	// not ignored, as they are on disk now.
	out, err = exec.Command(git, "-C", root, "ls-files", "-z", "--cached", "--others", "--exclude-standard").Output()
	if err != nil {
		t.Fatal(err)
	}
	proxy := t.TempDir()
	dir := filepath.Join(proxy, modulePath, "@v")
	os.MkdirAll(dir, 0o755)
	zf, err := os.Create(filepath.Join(dir, ver+".zip"))
	if err != nil {
		t.Fatal(err)
	}
	zw := zip.NewWriter(zf)
	n := 0
	for _, name := range strings.Split(strings.TrimRight(string(out), "\x00"), "\x00") {
		fi, err := os.Lstat(filepath.Join(root, name))
		if err != nil || !fi.Mode().IsRegular() {
			continue // deleted in the work tree, or a symbolic link (no module zip holds one)
		}
		b, err := os.ReadFile(filepath.Join(root, name))
		if err != nil {
			t.Fatal(err)
		}
		w, err := zw.Create(modulePath + "@" + ver + "/" + name)
		if err != nil {
			t.Fatal(err)
		}
		w.Write(b)
		n++
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	zf.Close()
	gomod, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	info := `{"Version":"` + ver + `","Time":"` + time.Now().UTC().Format(time.RFC3339) + `"}`
	os.WriteFile(filepath.Join(dir, ver+".mod"), gomod, 0o644)
	os.WriteFile(filepath.Join(dir, ver+".info"), []byte(info), 0o644)
	os.WriteFile(filepath.Join(dir, "list"), nil, 0o644) // no tags: @latest asks for @latest
	os.WriteFile(filepath.Join(proxy, modulePath, "@latest"), []byte(info), 0o644)

	// The dependencies come from the download cache of the module cache
	// the tests were built with, itself a proxy on disk: no network, and
	// a module cache of the test's own, so that the fake version of ipybox
	// stays out of the user's.
	out, err = exec.Command(goBin, "env", "GOMODCACHE").Output()
	if err != nil {
		t.Fatal(err)
	}
	deps := filepath.Join(strings.TrimSpace(string(out)), "cache", "download")
	gobin := t.TempDir()
	cmd := exec.Command(goBin, "install", modulePath+"/cmd/ipybox@latest")
	cmd.Dir = t.TempDir() // outside any module, as a user runs it
	cmd.Env = append(os.Environ(),
		"GOPROXY=file://"+filepath.ToSlash(proxy)+",file://"+filepath.ToSlash(deps),
		// Offline, there is no checksum database to ask: ipybox is not
		// published, and the dependencies in the download cache were
		// checked against go.sum when the tests' build fetched them.
		"GOSUMDB=off",
		// -trimpath: the module cache is new each run, and paths are
		// part of the build cache's keys; trimmed, a second run is cached.
		"GOMODCACHE="+t.TempDir(), "GOFLAGS=-modcacherw -trimpath", "GOWORK=off", "GOBIN="+gobin,
	)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go install %s/cmd/ipybox@latest (%d files): %v\n%s", modulePath, n, err, out)
	}
	out, err = exec.Command(filepath.Join(gobin, "ipybox"), "version").CombinedOutput()
	if err != nil {
		t.Fatalf("ipybox version: %v\n%s", err, out)
	}
	want := "ipybox " + ver + " (commit " + rev + ","
	if !strings.HasPrefix(string(out), want) {
		t.Errorf("ipybox version = %q, want it to start with %q", out, want)
	}
	t.Logf("%s", out)
}

package mcpconn

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
)

func TestValidName(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		ok   bool
	}{
		{"github", true},
		{"my_server2", true},
		{"_private", true},
		{"CamelCase", true},
		{"match", true}, // a soft keyword is a valid module name
		{"type", true},
		{"_", true},
		{strings.Repeat("a", 64), true},

		{"", false},
		{"my-server", false},
		{"my.server", false},
		{"2fast", false},
		{"with space", false},
		{"class", false},
		{"None", false},
		{"import", false},
		{"async", false},
		{"__init__", false},
		{"__x", false}, // the same rule as pygen's (it once accepted this)
		{"__pycache__", false},
		{"../etc", false},
		{"a/b", false},
		{"ünï", false},
		{"ﬁle", false}, // NFKC-normalizes to "file" in Python
		{strings.Repeat("a", 65), false},
	} {
		err := ValidName(tc.name)
		if (err == nil) != tc.ok {
			t.Errorf("ValidName(%q) = %v, want ok=%v", tc.name, err, tc.ok)
		}
		if err != nil && !strings.Contains(err.Error(), "Python identifier") {
			t.Errorf("ValidName(%q) = %q, want the rule stated", tc.name, err)
		}
	}
}

func TestRegistry(t *testing.T) {
	t.Parallel()
	r := NewRegistry()
	if err := r.Add("bad-name", Config{Command: "x"}); err == nil {
		t.Error("Add accepted an invalid name")
	}
	if err := r.Add("empty", Config{}); err == nil || !strings.Contains(err.Error(), `"empty"`) {
		t.Errorf("Add of an invalid config: %v, want an error naming the server", err)
	}
	c := Config{Command: "srv", Args: []string{"a"}, Env: map[string]string{"K": "${V}"}}
	if err := r.Add("b", c); err != nil {
		t.Fatal(err)
	}
	if err := r.Add("a", Config{URL: "http://h/mcp"}); err != nil {
		t.Fatal(err)
	}
	// The registry keeps its own copy.
	c.Env["K"] = "changed"
	got, ok := r.Get("b")
	if !ok || got.Env["K"] != "${V}" {
		t.Errorf("Get(b) = %+v, %v; the caller's map leaked in", got, ok)
	}
	got.Args[0] = "mutated"
	if again, _ := r.Get("b"); again.Args[0] != "a" {
		t.Errorf("Get returned shared slices")
	}
	if names := r.Names(); !slices.Equal(names, []string{"a", "b"}) {
		t.Errorf("Names() = %v", names)
	}
	if !r.Remove("a") || r.Remove("a") {
		t.Errorf("Remove: want true, then false")
	}
	if _, ok := r.Get("a"); ok {
		t.Errorf("Get after Remove found it")
	}
}

func TestRegistrySaveLoad(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, ".ipybox", "servers.json")
	r := NewRegistry()
	for name, c := range map[string]Config{
		"github": {URL: "https://api.example.com/mcp", Headers: map[string]string{"Authorization": "Bearer ${GITHUB_TOKEN}"}},
		"fs":     {Command: "mcp-server-filesystem", Args: []string{"${WORKSPACE}"}, Env: map[string]string{"KEY": "${API_KEY}"}, Sandbox: []byte(`{"filesystem":{"allowWrite":["."]}}`)},
	} {
		if err := r.Add(name, c); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("GITHUB_TOKEN", "ghp_should_never_be_saved")
	if err := r.Save(path); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Errorf("mode %v, want 0600", st.Mode().Perm())
	}
	data, _ := os.ReadFile(path)
	for _, want := range []string{`"mcpServers"`, "${GITHUB_TOKEN}", "${WORKSPACE}", "${API_KEY}", `"allowWrite"`} {
		if !strings.Contains(string(data), want) {
			t.Errorf("servers.json lacks %s:\n%s", want, data)
		}
	}
	if strings.Contains(string(data), "ghp_") {
		t.Errorf("servers.json holds a secret value:\n%s", data)
	}
	// No temp file is left behind: the folder holds servers.json and the
	// .gitignore that keeps ipybox's state out of git.
	entries, _ := os.ReadDir(filepath.Dir(path))
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if strings.Join(names, " ") != ".gitignore servers.json" {
		t.Errorf("folder holds %v, want only .gitignore and servers.json", names)
	}

	loaded, err := LoadRegistry(path)
	if err != nil {
		t.Fatal(err)
	}
	if names := loaded.Names(); !slices.Equal(names, []string{"fs", "github"}) {
		t.Errorf("loaded names %v", names)
	}
	fs1, _ := loaded.Get("fs")
	if fs1.Args[0] != "${WORKSPACE}" || !fs1.SandboxRequested() {
		t.Errorf("loaded fs = %+v", fs1)
	}

	// Saving again replaces the file atomically and keeps its mode.
	loaded.Remove("github")
	if err := loaded.Save(path); err != nil {
		t.Fatal(err)
	}
	again, err := LoadRegistry(path)
	if err != nil || !slices.Equal(again.Names(), []string{"fs"}) {
		t.Errorf("after a second save: %v, %v", again.Names(), err)
	}
	if st, _ := os.Stat(path); st.Mode().Perm() != 0o600 {
		t.Errorf("mode after a second save %v", st.Mode().Perm())
	}
}

func TestLoadRegistryErrors(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	r, err := LoadRegistry(filepath.Join(dir, "missing.json"))
	if err != nil || len(r.Names()) != 0 {
		t.Errorf("missing file: %v, %v; want an empty registry", r, err)
	}
	for _, tc := range []struct{ content, want string }{
		{`{"mcpServers": {"bad-name": {"command": "x"}}}`, `"bad-name"`},
		{`{"mcpServers": {"ok": {"command": "x", "url": "http://h"}}}`, `both "command" and "url"`},
		{`{"servers": {}}`, `unknown field "servers"`},
		{`not json`, "mcpServers"},
	} {
		p := filepath.Join(dir, "servers.json")
		if err := os.WriteFile(p, []byte(tc.content), 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := LoadRegistry(p)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("LoadRegistry(%s) = %v, want an error containing %s", tc.content, err, tc.want)
		}
	}
	// A folder in the way is an error, not an empty registry.
	if _, err := LoadRegistry(dir); err == nil || errors.Is(err, fs.ErrNotExist) {
		t.Errorf("LoadRegistry(a folder) = %v", err)
	}
}

// TestSaveEntryKeepsOthers: two registries of one workspace (two sessions'
// executors), each unaware of the other's server, save in turn and at once:
// the file keeps both servers, and each one's latest config. A file that
// does not load is left as it is.
func TestSaveEntryKeepsOthers(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, ".ipybox", "servers.json")
	a, b := NewRegistry(), NewRegistry()
	a.Add("alpha", Config{Command: "alpha"})
	b.Add("beta", Config{Command: "beta"})
	if err := a.SaveEntry(path, "alpha"); err != nil {
		t.Fatal(err)
	}
	if err := b.SaveEntry(path, "beta"); err != nil {
		t.Fatal(err)
	}
	// At once, many times: every save reads what the others wrote.
	var wg sync.WaitGroup
	for i := range 20 {
		r := NewRegistry()
		name := fmt.Sprintf("s%d", i)
		r.Add(name, Config{Command: name})
		wg.Go(func() {
			if err := r.SaveEntry(path, name); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	a.Add("alpha", Config{Command: "alpha2"})
	if err := a.SaveEntry(path, "alpha"); err != nil {
		t.Fatal(err)
	}
	got, err := LoadRegistry(path)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(got.Names()); n != 22 {
		t.Errorf("the file holds %d servers, want 22: %v", n, got.Names())
	}
	if c, _ := got.Get("alpha"); c.Command != "alpha2" {
		t.Errorf("alpha: %q, want its latest config", c.Command)
	}
	if c, _ := got.Get("beta"); c.Command != "beta" {
		t.Errorf("beta was lost to alpha's save: %+v", c)
	}
	// A registry without the name removes it.
	if err := NewRegistry().SaveEntry(path, "beta"); err != nil {
		t.Fatal(err)
	}
	if got, _ := LoadRegistry(path); slices.Contains(got.Names(), "beta") {
		t.Error("beta is still there after a save of its absence")
	}

	os.WriteFile(path, []byte(`{"mcpServers": {`), 0o600)
	if err := a.SaveEntry(path, "alpha"); err == nil || !strings.Contains(err.Error(), "does not load, and is left as it is") {
		t.Errorf("save over a corrupt file: %v", err)
	}
	if data, _ := os.ReadFile(path); string(data) != `{"mcpServers": {` {
		t.Errorf("the corrupt file was overwritten: %q", data)
	}
}

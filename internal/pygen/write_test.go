package pygen_test

import (
	"bytes"
	"encoding/json"
	"math/rand"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/ipybox/ipybox/internal/pygen"
)

func tool(name string) pygen.Tool {
	return pygen.Tool{Name: name, InputSchema: json.RawMessage(`{"type": "object", "properties": {"x": {"type": "string"}}}`)}
}

func listDir(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if rel != "." {
			out = append(out, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(out)
	return out
}

func TestWriteReplacesOnlyItsServer(t *testing.T) {
	root := filepath.Join(t.TempDir(), "mcptools")
	if _, err := pygen.Write(root, "a", []pygen.Tool{tool("one"), tool("two")}); err != nil {
		t.Fatal(err)
	}
	if _, err := pygen.Write(root, "b", []pygen.Tool{tool("keep")}); err != nil {
		t.Fatal(err)
	}
	// A user file in root and a stale module in a/ (from an older run).
	if err := os.WriteFile(filepath.Join(root, "notes.txt"), []byte("mine"), 0o644); err != nil {
		t.Fatal(err)
	}
	mods, err := pygen.Write(root, "a", []pygen.Tool{tool("three")})
	if err != nil {
		t.Fatal(err)
	}
	if len(mods) != 1 || mods[0].Name != "three" || mods[0].Tool != "three" {
		t.Errorf("modules = %+v, want just three", mods)
	}
	want := []string{"__init__.py", "a", "a/__init__.py", "a/three.py", "b", "b/__init__.py", "b/keep.py", "notes.txt"}
	if got := listDir(t, root); strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("after rewriting a:\n got  %v\n want %v", got, want)
	}
	if data, _ := os.ReadFile(filepath.Join(root, "__init__.py")); len(data) != 0 {
		t.Errorf("root __init__.py = %q, want empty", data)
	}
}

func TestWriteKeepsRootInit(t *testing.T) {
	root := t.TempDir()
	if err := os.WriteFile(filepath.Join(root, "__init__.py"), []byte("# user's\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := pygen.Write(root, "s", []pygen.Tool{tool("t")}); err != nil {
		t.Fatal(err)
	}
	if data, _ := os.ReadFile(filepath.Join(root, "__init__.py")); string(data) != "# user's\n" {
		t.Errorf("root __init__.py = %q, want it untouched", data)
	}
}

func TestWriteRemovesLeftovers(t *testing.T) {
	root := t.TempDir()
	for _, d := range []string{".s.tmp-0123", ".s.old-4567", ".other.tmp-89"} {
		if err := os.MkdirAll(filepath.Join(root, d, "x"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := pygen.Write(root, "s", []pygen.Tool{tool("t")}); err != nil {
		t.Fatal(err)
	}
	want := []string{".other.tmp-89", ".other.tmp-89/x", "__init__.py", "s", "s/__init__.py", "s/t.py"}
	if got := listDir(t, root); strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("got %v, want %v", got, want)
	}
}

func TestWriteReplacesSymlinkedServerWithoutFollowing(t *testing.T) {
	base := t.TempDir()
	root := filepath.Join(base, "mcptools")
	outside := filepath.Join(base, "outside")
	for _, d := range []string{root, outside} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(outside, "precious"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	// Kernel code can write the workspace: it may plant root/s -> outside.
	if err := os.Symlink(outside, filepath.Join(root, "s")); err != nil {
		t.Fatal(err)
	}
	if _, err := pygen.Write(root, "s", []pygen.Tool{tool("t")}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(outside, "precious")); err != nil {
		t.Errorf("a file outside root was removed: %v", err)
	}
	if fi, err := os.Lstat(filepath.Join(root, "s")); err != nil || !fi.IsDir() {
		t.Errorf("root/s is not a fresh directory: %v %v", fi, err)
	}
}

func TestWriteRefuses(t *testing.T) {
	base := t.TempDir()
	target := filepath.Join(base, "target")
	if err := os.Mkdir(target, 0o755); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(base, "link")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(base, "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, root, server string
		tools              []pygen.Tool
		want               string
	}{
		{"dotdot", filepath.Join(base, "r1"), "..", nil, "invalid server name"},
		{"absolute", filepath.Join(base, "r2"), "/abs", nil, "invalid server name"},
		{"slash", filepath.Join(base, "r3"), "a/b", nil, "invalid server name"},
		{"empty", filepath.Join(base, "r4"), "", nil, "invalid server name"},
		{"keyword", filepath.Join(base, "r5"), "import", nil, "invalid server name"},
		{"duplicate tools", filepath.Join(base, "r6"), "s", []pygen.Tool{tool("x"), tool("x")}, "appears twice"},
		{"bad schema", filepath.Join(base, "r7"), "s", []pygen.Tool{{Name: "x", InputSchema: json.RawMessage(`{"type":`)}}, "inputSchema"},
		{"symlinked root", link, "s", nil, "symbolic link"},
		{"root is a file", file, "s", nil, "not a directory"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := pygen.Write(tc.root, tc.server, tc.tools)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Write(%q, %q) error = %v, want one containing %q", tc.root, tc.server, err, tc.want)
			}
			if tc.root != link && tc.root != file {
				if _, err := os.Lstat(tc.root); !os.IsNotExist(err) {
					t.Errorf("Write did I/O before refusing: %s exists", tc.root)
				}
			}
		})
	}
	if got := listDir(t, target); len(got) != 0 {
		t.Errorf("Write wrote through the symlinked root: %v", got)
	}
}

func TestValidServerName(t *testing.T) {
	for _, tc := range []struct {
		name string
		ok   bool
	}{
		{"fs", true}, {"github", true}, {"_x", true}, {"My_Server2", true}, {strings.Repeat("a", 64), true},
		{"", false}, {"..", false}, {".", false}, {"/abs", false}, {"a/b", false}, {"a.b", false}, {"a-b", false},
		{"match", true}, {"type", true}, {"_", true}, // soft keywords are valid module names
		{"1fs", false}, {"class", false}, {"None", false}, {"async", false}, {"__pycache__", false}, {"__init__", false},
		{"__x", false}, {"ﬁle", false}, // two underscores; NFKC-normalizes to "file"
		{"ünï", false}, {"a b", false}, {"a\x00", false}, {strings.Repeat("a", 65), false},
	} {
		err := pygen.ValidServerName(tc.name)
		if (err == nil) != tc.ok {
			t.Errorf("ValidServerName(%q) = %v, want ok=%v", tc.name, err, tc.ok)
		}
		if err != nil && !strings.Contains(err.Error(), "Python identifier") {
			t.Errorf("ValidServerName(%q) error %q does not state the rule", tc.name, err)
		}
	}
}

func TestGenerateErrors(t *testing.T) {
	for _, tc := range []struct {
		name  string
		tools []pygen.Tool
		want  string
	}{
		{"empty name", []pygen.Tool{tool("")}, "empty name"},
		{"duplicate", []pygen.Tool{tool("a"), tool("b"), tool("a")}, `"a" appears twice`},
		{"input JSON", []pygen.Tool{{Name: "a", InputSchema: json.RawMessage(`{"a": 1} x`)}}, `tool "a": inputSchema`},
		{"output JSON", []pygen.Tool{{Name: "a", OutputSchema: json.RawMessage(`[`)}}, `tool "a": outputSchema`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, _, err := pygen.Generate("s", tc.tools); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error = %v, want one containing %q", err, tc.want)
			}
		})
	}
}

// TestGenerateIsDeterministic checks that the output depends on the tools,
// not on their order or on map iteration.
func TestGenerateIsDeterministic(t *testing.T) {
	var all []pygen.Tool
	for _, c := range cases {
		if c.name != "names" { // tool names are unique within a case only
			continue
		}
		all = append(all, loadTools(t, c.file)...)
	}
	all = append(all, loadTools(t, "schemas/memory.json")...)
	wantFiles, wantMods, err := pygen.Generate("s", all)
	if err != nil {
		t.Fatal(err)
	}
	want := goldenArchive(wantFiles, wantMods)
	r := rand.New(rand.NewSource(1))
	for i := 0; i < 5; i++ {
		shuffled := append([]pygen.Tool(nil), all...)
		r.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
		files, mods, err := pygen.Generate("s", shuffled)
		if err != nil {
			t.Fatal(err)
		}
		if got := goldenArchive(files, mods); !bytes.Equal(got, want) {
			t.Fatalf("output changed with the order of tools:\n%s", firstDiff(want, got))
		}
	}
}

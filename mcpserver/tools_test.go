package mcpserver

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"golang.org/x/tools/txtar"

	"github.com/ipybox/ipybox/internal/testenv"
)

var update = flag.Bool("update", false, "rewrite golden files")

// TestToolsGolden snapshots the tool list that clients see: names,
// descriptions and schemas. CI refuses to create the snapshot itself.
func TestToolsGolden(t *testing.T) {
	t.Parallel()
	srv := newServer(t, &Options{Workspace: t.TempDir(), Python: "/nonexistent/python3"})
	cs := connect(t, srv, nil)
	res, err := cs.ListTools(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	ar := &txtar.Archive{Comment: []byte("The tools of ipybox mcp as clients list them. Regenerate with\ngo test ./mcpserver -run TestToolsGolden -update\n")}
	for _, tool := range res.Tools {
		var b bytes.Buffer
		enc := json.NewEncoder(&b)
		enc.SetEscapeHTML(false)
		enc.SetIndent("", "  ")
		if err := enc.Encode(tool); err != nil {
			t.Fatal(err)
		}
		ar.Files = append(ar.Files, txtar.File{Name: tool.Name + ".json", Data: b.Bytes()})
	}
	got := txtar.Format(ar)
	path := filepath.Join("testdata", "tools.txtar")
	if *update {
		if testenv.InCI() {
			t.Fatal("-update in CI: golden files are written by a developer, not by CI")
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("missing %s (run go test ./mcpserver -run TestToolsGolden -update and review it): %v", path, err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s is stale (run go test ./mcpserver -run TestToolsGolden -update and review the diff):\n%s", path, got)
	}
	var names []string
	for _, tool := range res.Tools {
		names = append(names, tool.Name)
	}
	if strings.Join(names, ",") != "close_session,collect_cell,create_session,download_file,execute_ipython_cell,export_notebook,fork_session,install_package,interrupt,list_sessions,register_mcp_server,reset,rewind_session,upload_file" {
		t.Errorf("tools = %v", names)
	}
}

// TestBadArguments feeds bad arguments to every tool: each gets an error
// result that says what is wrong, and the server keeps serving.
func TestBadArguments(t *testing.T) {
	ws := sharedWorkspace(t)
	srv := newServer(t, &Options{Workspace: ws})
	cs := connect(t, srv, nil)
	huge := strings.Repeat("a", 5<<20)
	hugeCode := strings.Repeat("#", 11<<20)
	host := t.TempDir()
	os.WriteFile(filepath.Join(host, "f.txt"), []byte("x"), 0o600)
	okLocal := filepath.Join(host, "f.txt")
	for _, tc := range []struct {
		tool string
		args any
		want string // in the error text
	}{
		// Wrong types and shapes (the schema).
		{"execute_ipython_cell", map[string]any{"code": 5}, "code"},
		{"execute_ipython_cell", map[string]any{"code": "1", "timeout": "soon"}, "timeout"},
		{"execute_ipython_cell", map[string]any{"code": "1", "timeout": -1}, "timeout"},
		{"execute_ipython_cell", map[string]any{"code": "1", "timeout": 1e9}, "timeout"},
		{"execute_ipython_cell", map[string]any{"code": "1", "max_output_chars": 1.5}, "max_output_chars"},
		{"execute_ipython_cell", map[string]any{"code": "1", "max_output_chars": 0}, "max_output_chars"},
		{"execute_ipython_cell", map[string]any{}, "code"},
		{"execute_ipython_cell", map[string]any{"code": "1", "extra": true}, "extra"},
		{"execute_ipython_cell", map[string]any{"code": ""}, "code is empty"},
		{"execute_ipython_cell", map[string]any{"code": "print(1)\x00"}, "NUL"},
		{"execute_ipython_cell", map[string]any{"code": hugeCode}, "limit"},
		{"execute_ipython_cell", map[string]any{"code": "1", "max_wait": -1}, "max_wait"},
		{"collect_cell", map[string]any{"wait": -1}, "wait"},
		{"collect_cell", map[string]any{"wait": 1e9}, "wait"},
		{"interrupt", map[string]any{"session": 5}, "session"},
		{"interrupt", map[string]any{"session": "ipy_unknown"}, "unknown session"},
		{"register_mcp_server", map[string]any{"server_name": "x"}, "server_params"},
		{"register_mcp_server", map[string]any{"server_name": "x", "server_params": "npx server"}, "server_params"},
		{"register_mcp_server", map[string]any{"server_name": 7, "server_params": map[string]any{"command": "x"}}, "server_name"},
		{"register_mcp_server", map[string]any{"server_name": "", "server_params": map[string]any{"command": "x"}}, "server_name is empty"},
		{"register_mcp_server", map[string]any{"server_name": "../evil", "server_params": map[string]any{"command": "x"}}, "not a Python identifier"},
		{"register_mcp_server", map[string]any{"server_name": "a\x00b", "server_params": map[string]any{"command": "x"}}, "not a Python identifier"},
		{"register_mcp_server", map[string]any{"server_name": huge, "server_params": map[string]any{"command": "x"}}, "not a Python identifier"},
		{"register_mcp_server", map[string]any{"server_name": "class", "server_params": map[string]any{"command": "x"}}, "class"},
		{"register_mcp_server", map[string]any{"server_name": "ok_name", "server_params": map[string]any{}}, "server_params"},
		{"register_mcp_server", map[string]any{"server_name": "ok_name", "server_params": map[string]any{"command": "x", "url": "http://127.0.0.1:1/mcp"}}, "server_params"},
		{"register_mcp_server", map[string]any{"server_name": "ok_name", "server_params": map[string]any{"commnd": "x"}}, "commnd"},
		{"register_mcp_server", map[string]any{"server_name": "ok_name", "server_params": map[string]any{"command": "x\x00y"}}, "NUL"},
		{"register_mcp_server", map[string]any{"server_name": "ok_name", "server_params": map[string]any{"command": "/nonexistent/ipybox-test-server"}}, "ok_name"},
		{"install_package", map[string]any{}, "package_name"},
		{"install_package", map[string]any{"package_name": []string{"a"}}, "package_name"},
		{"install_package", map[string]any{"package_name": "  "}, "package_name is empty"},
		{"install_package", map[string]any{"package_name": "-r /etc/passwd"}, "pip options are not accepted"},
		{"install_package", map[string]any{"package_name": "--index-url=http://127.0.0.1:1/"}, "pip options are not accepted"},
		{"install_package", map[string]any{"package_name": "a\nb"}, "line break"},
		{"install_package", map[string]any{"package_name": "a\x00"}, "NUL"},
		{"install_package", map[string]any{"package_name": huge}, "limit"},
		{"reset", map[string]any{"now": true}, "now"},
		{"upload_file", map[string]any{"relpath": "a"}, "local_path"},
		{"upload_file", map[string]any{"relpath": 1, "local_path": okLocal}, "relpath"},
		{"upload_file", map[string]any{"relpath": "", "local_path": okLocal}, "relpath is empty"},
		{"upload_file", map[string]any{"relpath": ".", "local_path": okLocal}, "workspace itself"},
		{"upload_file", map[string]any{"relpath": "a/../../b", "local_path": okLocal}, `".."`},
		{"upload_file", map[string]any{"relpath": "a\x00b", "local_path": okLocal}, "NUL"},
		{"upload_file", map[string]any{"relpath": huge, "local_path": okLocal}, "limit"},
		{"upload_file", map[string]any{"relpath": "a", "local_path": okLocal + "\x00/etc/passwd"}, "NUL"},
		{"upload_file", map[string]any{"relpath": "a", "local_path": "/proc/self/environ"}, "outside the allowed directories"},
		{"upload_file", map[string]any{"relpath": "a", "local_path": host + strings.Repeat("/..", 10) + "/etc/passwd"}, "outside the allowed directories"},
		{"download_file", map[string]any{"relpath": ".ipybox/../../x", "local_path": filepath.Join(host, "x")}, `".."`},
		{"download_file", map[string]any{"relpath": "/etc/passwd", "local_path": filepath.Join(host, "x")}, "absolute"},
		{"download_file", map[string]any{"relpath": "a", "local_path": "~/x"}, "not absolute"},
		{"download_file", map[string]any{"relpath": "a", "local_path": []int{1}}, "local_path"},
	} {
		res := call(t, cs, tc.tool, tc.args)
		got := text(res)
		if !res.IsError || !strings.Contains(got, tc.want) {
			t.Errorf("%s(%s): error=%v %q, want an error result mentioning %q", tc.tool, short(args(tc.args)), res.IsError, short(got), tc.want)
		}
		if len(got) > 20000 {
			t.Errorf("%s(%s): the error text is %d bytes long", tc.tool, short(args(tc.args)), len(got))
		}
	}
	// Still serving, with state intact.
	if err := cs.Ping(t.Context(), nil); err != nil {
		t.Fatal(err)
	}
	if got := run(t, cs, "print('alive')"); got != "alive" {
		t.Errorf("after bad arguments: %q", got)
	}
	// An unknown tool is a protocol error, not a crash.
	if _, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "no_such_tool"}); err == nil {
		t.Error("unknown tool: no error")
	}
}

func args(a any) string {
	b, _ := json.Marshal(a)
	return string(b)
}

func TestTruncate(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   string
		max  int
		want string
	}{
		{"short", 10, "short"},
		{"0123456789", 10, "0123456789"},
		{"0123456789ab", 10, "01234\n\n[... 2 characters omitted; raise max_output_chars, or print less ...]\n\n789ab"},
		{"ééééééé", 4, "éé\n\n[... 3 characters omitted; raise max_output_chars, or print less ...]\n\néé"},
		{"abc", 1, "\n\n[... 2 characters omitted; raise max_output_chars, or print less ...]\n\nc"},
	} {
		if got := truncate(tc.in, tc.max); got != tc.want {
			t.Errorf("truncate(%q, %d) = %q, want %q", tc.in, tc.max, got, tc.want)
		}
	}
}

func FuzzTruncate(f *testing.F) {
	f.Add("hello, world", 5)
	f.Add("ééé\x00abc", 2)
	f.Fuzz(func(t *testing.T, s string, max int) {
		if max < 1 || max > 1000 {
			return
		}
		got := truncate(s, max)
		if len([]rune(s)) <= max {
			if got != s {
				t.Fatalf("short text changed: %q -> %q", s, got)
			}
			return
		}
		head, tail, ok := strings.Cut(got, "\n\n[... ")
		if !ok {
			t.Fatalf("no marker in %q", got)
		}
		_, tail, _ = strings.Cut(tail, " ...]\n\n")
		if !strings.HasPrefix(s, head) || !strings.HasSuffix(s, tail) || len([]rune(head))+len([]rune(tail)) != max {
			t.Fatalf("truncate(%q, %d) = %q", s, max, got)
		}
	})
}

func TestCheckHTTPAddr(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		addr   string
		noAuth bool
		want   string
	}{
		{"127.0.0.1:8080", false, ""},
		{"127.0.0.1:8080", true, ""},
		{"localhost:0", true, ""},
		{"[::1]:8080", true, ""},
		{":8080", false, "implicitly binds all interfaces"},
		{"0.0.0.0:8080", false, ""},
		{"0.0.0.0:8080", true, "without a bearer token is refused"},
		{"192.168.1.5:80", true, "without a bearer token is refused"},
		{"127.0.0.1", false, "want HOST:PORT"},
		{"127.0.0.1:", false, "no port"},
	} {
		err := CheckHTTPAddr(tc.addr, tc.noAuth)
		if (tc.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("CheckHTTPAddr(%q, %v) = %v, want %q", tc.addr, tc.noAuth, err, tc.want)
		}
	}
}

func TestAllowPatterns(t *testing.T) {
	t.Parallel()
	s := &Server{}
	var err error
	if s.allow, err = parseAllowPatterns([]string{"fs.read_*", "github.*", "m?.x"}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		server, tool string
		want         bool
	}{
		{"fs", "read_text_file", true},
		{"fs", "write_file", false},
		{"github", "anything", true},
		{"gitlab", "anything", false},
		{"m1", "x", true},
		{"m12", "x", false},
	} {
		if got := s.toolAllowed(tc.server, tc.tool); got != tc.want {
			t.Errorf("%s.%s: %v, want %v", tc.server, tc.tool, got, tc.want)
		}
	}
	for _, bad := range []string{"fs", ".x", "fs.", "fs.[", ""} {
		if _, err := parseAllowPatterns([]string{bad}); err == nil {
			t.Errorf("pattern %q accepted", bad)
		}
	}
}

func TestNewErrors(t *testing.T) {
	t.Parallel()
	ws := t.TempDir()
	file := filepath.Join(ws, "file")
	os.WriteFile(file, nil, 0o600)
	for _, tc := range []struct {
		opts Options
		want string
	}{
		{Options{Workspace: file}, "not a directory"},
		{Options{Workspace: ws, Approvals: ApprovalOptions{Mode: "maybe"}}, `approval mode "maybe"`},
		{Options{Workspace: ws, Approvals: ApprovalOptions{AllowTools: []string{"nodot"}}}, "SERVER.TOOL"},
		{Options{Workspace: ws, AllowedDirs: []string{"/nonexistent/dir"}}, "/nonexistent/dir"},
		{Options{Workspace: ws, Binds: []Bind{{HostPath: "rel", RelPath: "x"}}}, "must be absolute"},
		{Options{Workspace: ws, Binds: []Bind{{HostPath: ws, RelPath: "../x"}}}, `".."`},
	} {
		_, err := New(&tc.opts)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New(%+v) = %v, want %q", tc.opts, err, tc.want)
		}
	}
}

// TestBinds checks that a bound host directory appears in the workspace and
// that the file tools reach it through its relpath.
func TestBinds(t *testing.T) {
	t.Parallel()
	ws, hostDir, tmp := t.TempDir(), t.TempDir(), t.TempDir()
	srv, err := New(&Options{Workspace: ws, Binds: []Bind{{HostPath: hostDir, RelPath: "data/host"}}, AllowedDirs: []string{tmp}})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	if target, err := os.Readlink(filepath.Join(ws, "data", "host")); err != nil || target != hostDir {
		t.Fatalf("bind link: %q %v", target, err)
	}
	src := filepath.Join(tmp, "in.txt")
	os.WriteFile(src, []byte("bound"), 0o600)
	x, err := srv.createSession(localPrincipal)
	if err != nil {
		t.Fatal(err)
	}
	req := &mcp.CallToolRequest{Params: &mcp.CallToolParamsRaw{}}
	res, _, err := srv.uploadTool(t.Context(), req, fileArgs{Relpath: "data/host/sub/in.txt", LocalPath: src, Session: x.handle})
	if err != nil || res.IsError {
		t.Fatalf("upload into the bind: %v %v", err, res)
	}
	if b, err := os.ReadFile(filepath.Join(hostDir, "sub", "in.txt")); err != nil || string(b) != "bound" {
		t.Errorf("file in the bound directory: %q %v", b, err)
	}
	if _, _, err := srv.uploadTool(t.Context(), req, fileArgs{Relpath: "data/host", LocalPath: src, Session: x.handle}); err == nil || !strings.Contains(err.Error(), "names a bound directory") {
		t.Errorf("upload onto the bind itself: %v", err)
	}
	// The same bind again is fine (the link is already there); another
	// target at the same relpath is refused.
	if s2, err := New(&Options{Workspace: ws, Binds: []Bind{{HostPath: hostDir, RelPath: "data/host"}}}); err != nil {
		t.Errorf("same bind again: %v", err)
	} else {
		s2.Close()
	}
	if _, err := New(&Options{Workspace: ws, Binds: []Bind{{HostPath: tmp, RelPath: "data/host"}}}); err == nil || !strings.Contains(err.Error(), "already links to") {
		t.Errorf("another bind at the same relpath: %v", err)
	}
}

func TestLocalRequirementInside(t *testing.T) {
	t.Parallel()
	ws := t.TempDir()
	os.MkdirAll(filepath.Join(ws, "proj"), 0o755)
	os.Symlink("/etc", filepath.Join(ws, "out"))
	for _, tc := range []struct {
		req string
		ok  bool
	}{
		{"pandas", true}, {"requests==2.32.3", true}, {"numpy>=1.0; python_version>'3.8'", true},
		{"git+https://example.com/x.git", true}, {"https://example.com/x.whl", true},
		{"./proj", true}, {"proj/", true}, {ws + "/proj", true}, {"file://" + ws + "/proj", true}, {"x @ file://" + ws + "/proj", true},
		{"/etc", false}, {"../x", false}, {"./proj/../../x", false}, {"~/proj", false}, {"file:///etc", false},
		{"x @ file:///tmp/evil", false}, {"out/", false}, // a link out of the workspace
	} {
		err := localRequirementInside(ws, tc.req)
		if (err == nil) != tc.ok {
			t.Errorf("%q: %v, want ok=%v", tc.req, err, tc.ok)
		}
		if err != nil && !strings.Contains(err.Error(), "outside the workspace") {
			t.Errorf("%q: %v does not say why", tc.req, err)
		}
	}
}

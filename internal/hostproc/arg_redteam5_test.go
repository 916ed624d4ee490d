package hostproc

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestArgInside: the arguments through which kernel code could change
// what a host program runs, and the arguments that are data. Refused: a
// script or folder in the interpreter's script place, however the options
// before it are spelt (a value that is no file, python3 -X dev, keeps the
// place open; a file loaded by an option, node -r F, is not the script);
// a runner's package or project from the workspace (npx <ws>/pkg,
// uvx --from <ws>/pkg, uv run --directory <ws>), wherever it stands; an
// unknown program's first operand that is a file (tsx <ws>/srv.ts); what
// a wrapper runs. Allowed: the workspace, and files in it, as data after
// the script, module or package (the filesystem server's root,
// mcp-server-git's repository, a key file: the sandbox's masks hide the
// files a config names from kernels).
func TestArgInside(t *testing.T) {
	ws, out, priv := t.TempDir(), t.TempDir(), t.TempDir()
	for _, p := range []string{filepath.Join(out, "srv.py"), filepath.Join(out, "hook.js"), filepath.Join(ws, "data.txt")} {
		if err := os.WriteFile(p, nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(ws, "pkg"), 0o755); err != nil {
		t.Fatal(err)
	}
	pkg := filepath.Join(ws, "pkg")
	// A venv's interpreter and a script, each a link in the workspace to
	// a file outside: kernel code replaces the link, and a venv's
	// interpreter loads the venv's .pth files.
	if err := os.MkdirAll(filepath.Join(ws, ".venv", "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, l := range []string{filepath.Join(ws, ".venv", "bin", "python"), filepath.Join(ws, "lnk")} {
		if err := os.Symlink(filepath.Join(out, "srv.py"), l); err != nil {
			t.Fatal(err)
		}
	}
	w := []string{ws}
	refused := []struct{ prog, args string }{
		{"python3", "-X dev " + pkg},
		{"python3", "-W ignore -u " + pkg},
		{"/usr/bin/python3.12", pkg},
		{"node", "-r " + filepath.Join(out, "hook.js") + " " + pkg},
		{"node", "--title t " + pkg},
		{"node", "--require=" + pkg + " " + filepath.Join(out, "srv.py")},
		{"python3", "-c exec(open('" + ws + "/x.py').read())"},
		{"tsx", filepath.Join(ws, "data.txt")},
		{"java", "-jar " + filepath.Join(ws, "data.txt")},
		{"python3", "-X pycache_prefix=" + ws + "/pyc " + filepath.Join(out, "srv.py")},
		{"npx", "-y " + pkg},
		{"npx", "--package " + pkg + " srv"},
		{"uvx", "--python 3.12 --from " + pkg + " srv"},
		{"uvx", "--with-editable=" + pkg + " srv"},
		{"uv", "run --directory " + ws + " srv"},
		{"uv", "run --project=" + ws + " srv"},
		{"uv", "tool run --from " + pkg + " srv"},
		{"npm", "--prefix " + ws + " exec srv"},
		{"bash", pkg + "/../x.sh"},
		{"npx", "-y git+file://" + pkg},
		{"uvx", "--from git+file://" + pkg + " srv"},
		{"npx", "-y file:" + pkg},
		{"env", "python3 " + pkg},
		{"/usr/bin/env", "-S PYTHONUNBUFFERED=1 timeout 60 node " + pkg},
		{"timeout", "60 uvx --from " + pkg + " srv"},
		{"env", filepath.Join(ws, ".venv", "bin", "python") + " " + filepath.Join(out, "srv.py")},
		{"bash", "-c " + filepath.Join(ws, ".venv", "bin", "python")},
		{"node", filepath.Join(ws, "lnk")},
	}
	for _, c := range refused {
		if a, f := ArgInside(c.prog, strings.Fields(c.args), priv, w); f != ws {
			t.Errorf("%s %s: (%q, %q); want it refused", c.prog, c.args, a, f)
		}
	}
	allowed := []struct{ prog, args string }{
		{"python3", filepath.Join(out, "srv.py") + " " + ws},
		{"python3", "-u " + filepath.Join(out, "srv.py") + " --root=" + pkg},
		{"python3", "-m srv " + ws},
		{"node", filepath.Join(out, "hook.js") + " " + pkg},
		{"npx", "-y @modelcontextprotocol/server-filesystem " + ws},
		{"uvx", "mcp-server-git --repository " + ws},
		{"uvx", "--python 3.12 srv " + ws},
		{"docker", "run -i --rm -v " + ws + ":/w image"},
		{"/opt/srv/bin/server", "--root " + ws},
		{"env", "FOO=1 npx -y @modelcontextprotocol/server-filesystem " + ws},
		{"timeout", "60 " + filepath.Join(out, "srv.py") + " " + pkg},
		{"python3", filepath.Join(out, "srv.py") + " --config=" + filepath.Join(ws, "data.txt")},
		{"python3", "-c " + filepath.Join(out, "srv.py") + " --key-file " + filepath.Join(ws, "data.txt")},
		{"mcp-server-filesystem", ws},
		{"/opt/bin/server", "--db-path " + filepath.Join(ws, "data.txt")},
	}
	for _, c := range allowed {
		if a, f := ArgInside(c.prog, strings.Fields(c.args), priv, w); f != "" {
			t.Errorf("%s %s: refused (%q, %q); the workspace is data there", c.prog, c.args, a, f)
		}
	}
}

// TestCodeFamilies: a variable of a family through which a program loads
// code (PYTHONPYCACHEPREFIX, GIT_CONFIG_GLOBAL, GCONV_PATH, OPENSSL_CONF,
// NODE_COMPILE_CACHE, GEM_HOME, PERLLIB, whatever its case) that names a
// path in the workspace is dropped; the same path in a variable of the
// server's own (its data file) stays, and so do a family's variables that
// name no path there.
func TestCodeFamilies(t *testing.T) {
	ws := t.TempDir()
	dropped := []string{"PYTHONPYCACHEPREFIX=" + ws + "/pyc", "GIT_CONFIG_GLOBAL=" + ws + "/.gitconfig", "GCONV_PATH=" + ws,
		"OPENSSL_CONF=" + ws + "/o.cnf", "NODE_COMPILE_CACHE=" + ws + "/c", "GEM_HOME=" + ws + "/g", "PERLLIB=" + ws,
		"pythonpycacheprefix=" + ws + "/p", "UV_INDEX_URL=file://" + ws + "/idx"}
	kept := []string{"MEMORY_FILE_PATH=" + ws + "/memory.json", "PYTHONUNBUFFERED=1", "GITHUB_TOKEN=x", "NODE_ENV=production",
		"PYTHONPYCACHEPREFIX=" + t.TempDir()}
	cmd := &exec.Cmd{Path: "/bin/true", Env: append(append([]string{}, dropped...), kept...)}
	got, err := Prepare(cmd, []string{ws})
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range dropped {
		if !slices.Contains(got, kv) || slices.Contains(cmd.Env, kv) {
			t.Errorf("%s reached the process (dropped: %v)", kv, got)
		}
	}
	for _, kv := range kept {
		if !slices.Contains(cmd.Env, kv) {
			t.Errorf("%s was dropped", kv)
		}
	}
}

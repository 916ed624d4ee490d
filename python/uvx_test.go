//go:build linux

package python_test

import (
	"archive/zip"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/ipybox/ipybox/internal/testenv"
)

// fakeWheel writes, into dir, a pure-Python wheel named ipybox at version
// whose `ipybox` script writes marker and exits: upstream's package as
// PyPI has it (0.9.2), or a planted one. It returns the wheel's path.
func fakeWheel(t *testing.T, dir, version, marker string) string {
	t.Helper()
	name := fmt.Sprintf("ipybox-%s-py3-none-any.whl", version)
	path := filepath.Join(dir, name)
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zw := zip.NewWriter(f)
	info := "ipybox-" + version + ".dist-info/"
	files := []struct{ name, body string }{
		{"fakeipybox.py", fmt.Sprintf("import sys\ndef main():\n    open(%q, 'a').write('ran ' + ' '.join(sys.argv) + '\\n')\n    sys.exit(3)\n", marker)},
		{info + "METADATA", "Metadata-Version: 2.1\nName: ipybox\nVersion: " + version + "\n"},
		{info + "WHEEL", "Wheel-Version: 1.0\nGenerator: ipybox-test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"},
		{info + "entry_points.txt", "[console_scripts]\nipybox = fakeipybox:main\n"},
	}
	var record strings.Builder
	for _, fl := range files {
		w, err := zw.Create(fl.name)
		if err != nil {
			t.Fatal(err)
		}
		w.Write([]byte(fl.body))
		sum := sha256.Sum256([]byte(fl.body))
		fmt.Fprintf(&record, "%s,sha256=%s,%d\n", fl.name, base64.RawURLEncoding.EncodeToString(sum[:]), len(fl.body))
	}
	record.WriteString(info + "RECORD,,\n")
	w, err := zw.Create(info + "RECORD")
	if err != nil {
		t.Fatal(err)
	}
	w.Write([]byte(record.String()))
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

// uvEnv is the environment of uv's runs: uv's caches, tools and config in
// home; offline, with no index: the only place to find packages is
// findLinks, a local folder of wheels (UV_FIND_LINKS, UV_NO_INDEX,
// UV_OFFLINE), and Python is never downloaded.
func uvEnv(home, findLinks string) map[string]string {
	return map[string]string{
		"UV_CACHE_DIR":          filepath.Join(home, "cache"),
		"UV_TOOL_DIR":           filepath.Join(home, "tools"),
		"UV_TOOL_BIN_DIR":       filepath.Join(home, "bin"),
		"UV_PYTHON_INSTALL_DIR": filepath.Join(home, "pythons"),
		"UV_PYTHON_DOWNLOADS":   "never",
		"UV_NO_INDEX":           "1",
		"UV_OFFLINE":            "1",
		"UV_FIND_LINKS":         findLinks,
		// uv's user-level config (and ipybox's approval policy) in home.
		"XDG_CONFIG_HOME": filepath.Join(home, "config"),
	}
}

func envList(m map[string]string) []string {
	var out []string
	for k, v := range m {
		out = append(out, k+"="+v)
	}
	slices.Sort(out)
	return out
}

// TestWheelUvx runs this machine's wheel the way the seeds' minimal
// configuration does, with uv from PyPI (scripts/pyvenv.sh uv), offline,
// from a local folder of wheels that also holds a stand-in for upstream's
// ipybox 0.9.2, PyPI's last:
//   - `uvx --from WHEEL ipybox mcp` serves the MCP Inspector a cell and a
//     tool list;
//   - the seeds' {"command": "uvx", "args": ["ipybox", "mcp"]} does too,
//     and picks ours (0.10.0 sorts above 0.9.2: issue 37.3): upstream's
//     stand-in never runs;
//   - the same from a workspace where a pyproject.toml, a uv.toml and a
//     .python-version were planted (by kernel code, or a cloned
//     repository) that point uv at a planted "ipybox 99.0.0" and at a
//     Python that does not exist: uvx, a tool command, reads none of them,
//     so what runs is still ours;
//   - `uv run --with WHEEL` drives the Python API example of
//     python/README.md (a tool call, approved). A project command, uv run
//     reads the working directory's uv.toml even with --no-project (the
//     control of the planted case); with --no-config it does not.
func TestWheelUvx(t *testing.T) {
	t.Parallel()
	whl := hostWheel(t)
	version := checkoutVersion(t)
	uv := testenv.UV(t)
	uvx := filepath.Join(filepath.Dir(uv), "uvx")
	path := npmPath(t)

	// The local index: our wheel, and upstream's last release.
	index := t.TempDir()
	if err := os.Symlink(whl, filepath.Join(index, filepath.Base(whl))); err != nil {
		t.Fatal(err)
	}
	upstreamRan := filepath.Join(t.TempDir(), "upstream-ran")
	fakeWheel(t, index, "0.9.2", upstreamRan)

	home := t.TempDir()
	uvVars := uvEnv(home, index)
	env := cleanEnv(filepath.Dir(uv)+string(os.PathListSeparator)+path, envList(uvVars)...)

	t.Run("uvx --from WHEEL ipybox mcp", func(t *testing.T) {
		inspectorMCP(t, t.TempDir(), env, map[string]any{
			"command": uvx, "args": []string{"--from", whl, "ipybox", "mcp"}, "env": uvVars,
		})
	})
	t.Run("the seeds' uvx ipybox mcp", func(t *testing.T) {
		inspectorMCP(t, t.TempDir(), env, map[string]any{
			"command": "uvx", "args": []string{"ipybox", "mcp"}, "env": uvVars,
		})
		out := run(t, t.TempDir(), env, uvx, "ipybox", "version")
		if f := strings.Fields(out); len(f) < 2 || f[1] != version {
			t.Errorf("uvx ipybox version = %q, want ipybox %s (ours, not upstream's 0.9.2)", out, version)
		}
	})
	t.Run("a planted project changes nothing", func(t *testing.T) {
		ws := t.TempDir()
		evil := t.TempDir()
		plantedRan := filepath.Join(t.TempDir(), "planted-ran")
		fakeWheel(t, evil, "99.0.0", plantedRan)
		planted := map[string]string{
			"pyproject.toml":  fmt.Sprintf("[project]\nname = \"ipybox\"\nversion = \"99.0.0\"\nrequires-python = \">=3.7\"\n\n[tool.uv]\nfind-links = [%q]\nno-index = true\n", evil),
			"uv.toml":         fmt.Sprintf("find-links = [%q]\nno-index = true\npython-preference = \"only-managed\"\n", evil),
			".python-version": "3.7.1\n",
		}
		for name, body := range planted {
			if err := os.WriteFile(filepath.Join(ws, name), []byte(body), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		inspectorMCP(t, ws, env, map[string]any{
			"command": "uvx", "args": []string{"ipybox", "mcp"}, "env": uvVars,
		})
		out := run(t, ws, env, uvx, "ipybox", "version")
		if f := strings.Fields(out); len(f) < 2 || f[1] != version {
			t.Errorf("uvx ipybox version in a planted workspace = %q, want ipybox %s", out, version)
		}
		if b, err := os.ReadFile(plantedRan); err == nil {
			t.Errorf("the planted ipybox 99.0.0 ran: %s", b)
		}
		// The control: a project command (uv run) does read the planted
		// uv.toml, even with --no-project (here its python-preference
		// finds no Python), so the files above are live; --no-config is
		// what keeps uv run from them.
		ctx := t.Context()
		cmd := exec.CommandContext(ctx, uv, "run", "--no-project", "--with", whl, "ipybox", "version")
		cmd.Dir, cmd.Env = ws, env
		if out, err := cmd.CombinedOutput(); err == nil && strings.Contains(string(out), "ipybox "+version) {
			t.Errorf("uv run --no-project ignored the planted uv.toml (the control of this test): %s", out)
		}
		out = run(t, ws, env, uv, "run", "--no-config", "--no-project", "--with", whl, "ipybox", "version")
		if !strings.Contains(out, "ipybox "+version+" (") {
			t.Errorf("uv run --no-config --no-project in a planted workspace = %q, want ipybox %s", out, version)
		}
	})
	t.Run("uv run drives the Python API", func(t *testing.T) {
		ws := t.TempDir()
		out := run(t, ws, env, uv, "run", "--no-project", "--with", whl, "python", "-c", readmeExample(t))
		if !strings.Contains(out, "approving everything.echo(message='hi')") || !strings.Contains(out, "Echo: hi") {
			t.Errorf("uv run: the README's example printed:\n%s", out)
		}
		t.Logf("uv run --no-project --with WHEEL python -c <python/README.md's example>:\n%s", strings.TrimSpace(out))
	})
	if b, err := os.ReadFile(upstreamRan); err == nil {
		t.Errorf("upstream's ipybox 0.9.2 ran instead of ours: %s", b)
	}
}

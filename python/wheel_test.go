//go:build linux

package python_test

import (
	"archive/tar"
	"archive/zip"
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"debug/elf"
	"debug/macho"
	"debug/pe"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net/mail"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ipybox/ipybox/internal/testenv"
)

// The wheels scripts/wheels.sh builds: the platform tag of each, and the
// binary it must carry.
var wheelTargets = []struct {
	plat         string
	goos, goarch string
}{
	{"manylinux_2_17_x86_64.manylinux2014_x86_64", "linux", "amd64"},
	{"manylinux_2_17_aarch64.manylinux2014_aarch64", "linux", "arm64"},
	{"macosx_13_0_x86_64", "darwin", "amd64"},
	{"macosx_13_0_arm64", "darwin", "arm64"},
	{"win_amd64", "windows", "amd64"},
}

const registryName = "io.github.ipybox/ipybox"

// checkoutVersion is python/ipybox/_version.py's version, which
// cmd/ipybox's TestVersionsAgree holds equal to the Go release.
func checkoutVersion(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(testenv.RepoRoot(t), "python", "ipybox", "_version.py"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^__version__ = "([^"]*)"$`).FindSubmatch(b)
	if m == nil {
		t.Fatalf("python/ipybox/_version.py has no __version__ line")
	}
	return string(m[1])
}

var builtWheels struct {
	once sync.Once
	dir  string
	out  []byte
	err  error
}

// wheelDir runs scripts/wheels.sh once per test binary and returns the
// folder of wheels. The folder is in the user's cache, one per checkout,
// and the script does nothing when its inputs have not changed, so only
// the first run after a change pays for the build (seconds from a warm Go
// build cache).
func wheelDir(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds the wheels: skipped with -short")
	}
	testenv.NeedsTool(t, "go")
	bash := testenv.NeedsTool(t, "bash")
	if buildPython() == "" {
		testenv.Missing(t, "a python3 with build, setuptools and wheel (apt-get install python3-build python3-setuptools python3-wheel; scripts/setup.sh)")
	}
	root := testenv.RepoRoot(t)
	builtWheels.once.Do(func() {
		cache, err := os.UserCacheDir()
		if err != nil {
			cache = os.TempDir()
		}
		abs, _ := filepath.Abs(root)
		sum := sha256.Sum256([]byte(abs))
		builtWheels.dir = filepath.Join(cache, "ipybox-test", fmt.Sprintf("wheels-%x", sum[:6]))
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, bash, filepath.Join(root, "scripts", "wheels.sh"))
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "IPYBOX_WHEEL_DIR="+builtWheels.dir)
		builtWheels.out, builtWheels.err = cmd.CombinedOutput()
	})
	if builtWheels.err != nil {
		t.Fatalf("scripts/wheels.sh: %v\n%s", builtWheels.err, builtWheels.out)
	}
	return builtWheels.dir
}

// buildPython is the interpreter wheels.sh would use, or "".
func buildPython() string {
	cands := []string{"python3"}
	if runtime.GOOS == "linux" {
		cands = append(cands, "/usr/bin/python3")
	}
	for _, c := range cands {
		if exec.Command(c, "-c", "import build, setuptools, wheel").Run() == nil {
			return c
		}
	}
	return ""
}

func wheelPath(dir, version, plat string) string {
	return filepath.Join(dir, "ipybox-"+version+"-py3-none-"+plat+".whl")
}

func readZip(t *testing.T, z *zip.Reader, name string) []byte {
	t.Helper()
	for _, f := range z.File {
		if f.Name == name {
			rc, err := f.Open()
			if err != nil {
				t.Fatal(err)
			}
			defer rc.Close()
			b, err := io.ReadAll(rc)
			if err != nil {
				t.Fatal(err)
			}
			return b
		}
	}
	t.Fatalf("the wheel has no %s", name)
	return nil
}

// TestWheels builds every wheel and inspects each: its name and WHEEL
// tags, its metadata, its RECORD, its Python files, and its one script,
// the ipybox binary, whose architecture and format must be the tag's
// (a static ELF for manylinux, a Mach-O no newer than the macOS the tag
// names, a console PE for Windows). The version is the one the Go build
// reports: the host's binary is run for it.
func TestWheels(t *testing.T) {
	t.Parallel()
	dir := wheelDir(t)
	version := checkoutVersion(t)
	root := testenv.RepoRoot(t)
	license, err := os.ReadFile(filepath.Join(root, "LICENSE"))
	if err != nil {
		t.Fatal(err)
	}
	api, _ := filepath.Glob(filepath.Join(root, "python", "ipybox", "*.py"))
	if len(api) == 0 {
		t.Fatal("no python/ipybox/*.py")
	}

	var sizes []string
	for _, w := range wheelTargets {
		t.Run(w.plat, func(t *testing.T) {
			path := wheelPath(dir, version, w.plat)
			fi, err := os.Stat(path)
			if err != nil {
				entries, _ := os.ReadDir(dir)
				t.Fatalf("no wheel for %s: %v (the folder has %v)", w.plat, err, entries)
			}
			sizes = append(sizes, fmt.Sprintf("%5.1f MB  %s", float64(fi.Size())/1e6, filepath.Base(path)))
			zr, err := zip.OpenReader(path)
			if err != nil {
				t.Fatal(err)
			}
			defer zr.Close()
			z := &zr.Reader
			distInfo := "ipybox-" + version + ".dist-info/"
			data := "ipybox-" + version + ".data/"

			// WHEEL: one Tag line per tag the file name compresses.
			hdr := parseHeaders(t, readZip(t, z, distInfo+"WHEEL"))
			var want []string
			for _, p := range strings.Split(w.plat, ".") {
				want = append(want, "py3-none-"+p)
			}
			if got := hdr["Tag"]; !slices.Equal(got, want) {
				t.Errorf("WHEEL tags %v, want %v", got, want)
			}
			if got := first(hdr, "Wheel-Version"); got != "1.0" {
				t.Errorf("Wheel-Version %q", got)
			}
			if got := first(hdr, "Root-Is-Purelib"); got != "true" {
				t.Errorf("Root-Is-Purelib %q: the Python files are the same on every platform", got)
			}

			checkMetadata(t, readZip(t, z, distInfo+"METADATA"), version)
			if got := readZip(t, z, distInfo+"LICENSE"); !bytes.Equal(got, license) {
				t.Error("the wheel's LICENSE is not the repository's")
			}
			checkRecord(t, z, distInfo+"RECORD")

			// The files: the Python API as in the checkout (the version
			// written in), the licence and metadata, and one script. No
			// entry points: a console-script shim would start Python first.
			exe := "ipybox"
			if w.goos == "windows" {
				exe = "ipybox.exe"
			}
			var script *zip.File
			for _, f := range z.File {
				switch {
				case f.Name == data+"scripts/"+exe:
					script = f
				case strings.HasPrefix(f.Name, data):
					t.Errorf("unexpected data file %s", f.Name)
				case f.Name == distInfo+"entry_points.txt":
					t.Errorf("the wheel has entry points (a Python shim in front of the binary)")
				case strings.HasPrefix(f.Name, "ipybox/"):
					if f.Name == "ipybox/_version.py" {
						if m := regexp.MustCompile(`(?m)^__version__ = "([^"]*)"$`).FindSubmatch(readZip(t, z, f.Name)); m == nil || string(m[1]) != version {
							t.Errorf("the wheel's ipybox/_version.py: %s", readZip(t, z, f.Name))
						}
						continue
					}
					src, err := os.ReadFile(filepath.Join(root, "python", filepath.FromSlash(f.Name)))
					if err != nil || !bytes.Equal(src, readZip(t, z, f.Name)) {
						t.Errorf("the wheel's %s is not python/%s", f.Name, f.Name)
					}
				}
			}
			for _, p := range api {
				name := "ipybox/" + filepath.Base(p)
				if !slices.ContainsFunc(z.File, func(f *zip.File) bool { return f.Name == name }) {
					t.Errorf("the wheel lacks %s", name)
				}
			}
			if script == nil {
				t.Fatalf("the wheel has no %sscripts/%s", data, exe)
			}
			if mode := script.Mode(); mode.Perm() != 0o755 || !mode.IsRegular() {
				t.Errorf("scripts/%s has mode %v; pip keeps the executable bits it finds", exe, mode)
			}
			bin := readZip(t, z, script.Name)
			checkBinary(t, bin, w.goos, w.goarch, w.plat)

			// The version comes from the Go build: the binary says it.
			if w.goos == runtime.GOOS && w.goarch == runtime.GOARCH {
				p := filepath.Join(t.TempDir(), exe)
				os.WriteFile(p, bin, 0o755)
				out, err := exec.Command(p, "version").CombinedOutput()
				if err != nil {
					t.Fatalf("%s version: %v\n%s", exe, err, out)
				}
				if f := strings.Fields(string(out)); len(f) < 2 || f[0] != "ipybox" || f[1] != version {
					t.Errorf("the wheel's binary says %q; its metadata says version %s", out, version)
				}
				t.Logf("%s", bytes.TrimSpace(out))
			}
		})
	}
	t.Run("sdist", func(t *testing.T) {
		checkSdist(t, filepath.Join(dir, "ipybox-"+version+".tar.gz"), version)
	})
	t.Logf("wheels in %s:\n%s", dir, strings.Join(sizes, "\n"))
}

func first(h map[string][]string, k string) string {
	if v := h[k]; len(v) > 0 {
		return v[0]
	}
	return ""
}

// parseHeaders reads an RFC 822 style header block (WHEEL, METADATA's
// head), keeping repeated keys in order.
func parseHeaders(t *testing.T, b []byte) map[string][]string {
	t.Helper()
	msg, err := mail.ReadMessage(bytes.NewReader(append(bytes.TrimRight(b, "\n"), "\n\n"...)))
	if err != nil {
		t.Fatalf("headers: %v\n%s", err, b)
	}
	return msg.Header
}

// checkMetadata checks what PyPI shows and pip obeys: the name and the
// version, the licence, the project's URLs, requires-python, no
// dependency, and the README as the description, with the registry's
// mcp-name line.
func checkMetadata(t *testing.T, b []byte, version string) {
	t.Helper()
	msg, err := mail.ReadMessage(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("METADATA: %v", err)
	}
	h := msg.Header
	for k, want := range map[string]string{
		"Metadata-Version":         "2.1",
		"Name":                     "ipybox",
		"Version":                  version,
		"License":                  "Apache-2.0",
		"Requires-Python":          ">=3.10",
		"Description-Content-Type": "text/markdown",
	} {
		if got := h.Get(k); got != want {
			t.Errorf("METADATA %s = %q, want %q", k, got, want)
		}
	}
	if h.Get("Summary") == "" {
		t.Error("METADATA has no Summary")
	}
	if !slices.Contains(h["Classifier"], "License :: OSI Approved :: Apache Software License") {
		t.Errorf("METADATA classifiers %v lack the licence", h["Classifier"])
	}
	urls := map[string]string{}
	for _, u := range h["Project-Url"] {
		k, v, _ := strings.Cut(u, ", ")
		urls[k] = v
	}
	for _, k := range []string{"Homepage", "Repository", "Documentation", "Issues"} {
		if !strings.HasPrefix(urls[k], "https://github.com/ipybox/ipybox") {
			t.Errorf("METADATA Project-URL %s = %q", k, urls[k])
		}
	}
	if d := h["Requires-Dist"]; len(d) > 0 {
		t.Errorf("METADATA Requires-Dist %v: the Python API is standard library only", d)
	}
	body, _ := io.ReadAll(msg.Body)
	for _, want := range []string{"mcp-name: " + registryName, "pip install ipybox", "uvx ipybox mcp", "## Building from source"} {
		if !bytes.Contains(body, []byte(want)) {
			t.Errorf("the description lacks %q", want)
		}
	}
}

// checkRecord checks that RECORD lists every file of the wheel with its
// hash and size, as pip relies on to uninstall.
func checkRecord(t *testing.T, z *zip.Reader, name string) {
	t.Helper()
	listed := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(readZip(t, z, name)))
	for sc.Scan() {
		f := strings.Split(sc.Text(), ",")
		if len(f) != 3 {
			t.Errorf("RECORD line %q", sc.Text())
			continue
		}
		listed[f[0]] = f[1] + "," + f[2]
	}
	for _, f := range z.File {
		got, ok := listed[f.Name]
		delete(listed, f.Name)
		if f.Name == name {
			continue
		}
		b := readZip(t, z, f.Name)
		sum := sha256.Sum256(b)
		if want := "sha256=" + base64.RawURLEncoding.EncodeToString(sum[:]) + "," + strconv.Itoa(len(b)); !ok || got != want {
			t.Errorf("RECORD for %s: %q, want %q", f.Name, got, want)
		}
	}
	if len(listed) > 0 {
		t.Errorf("RECORD lists files the wheel lacks: %v", listed)
	}
}

// checkBinary checks that b is an executable for goos/goarch that the
// platform tag plat promises to run.
func checkBinary(t *testing.T, b []byte, goos, goarch, plat string) {
	t.Helper()
	r := bytes.NewReader(b)
	switch goos {
	case "linux":
		f, err := elf.NewFile(r)
		if err != nil {
			t.Fatalf("not an ELF file: %v", err)
		}
		want := map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}[goarch]
		if f.Machine != want || f.Class != elf.ELFCLASS64 || f.Type != elf.ET_EXEC {
			t.Errorf("ELF %v %v %v, want %v ELFCLASS64 ET_EXEC", f.Machine, f.Class, f.Type, want)
		}
		// manylinux promises a glibc no newer than 2.17; a binary with no
		// interpreter and no shared library needs none at all.
		for _, p := range f.Progs {
			if p.Type == elf.PT_INTERP || p.Type == elf.PT_DYNAMIC {
				t.Errorf("the binary is dynamically linked (%v); manylinux tags need it static", p.Type)
			}
		}
		if libs, _ := f.ImportedLibraries(); len(libs) > 0 {
			t.Errorf("the binary needs %v", libs)
		}
	case "darwin":
		f, err := macho.NewFile(r)
		if err != nil {
			t.Fatalf("not a Mach-O file: %v", err)
		}
		want := map[string]macho.Cpu{"amd64": macho.CpuAmd64, "arm64": macho.CpuArm64}[goarch]
		if f.Cpu != want || f.Type != macho.TypeExec {
			t.Errorf("Mach-O %v %v, want %v executable", f.Cpu, f.Type, want)
		}
		// The tag says the oldest macOS the wheel installs on; the
		// binary's LC_BUILD_VERSION says the oldest it runs on.
		m := regexp.MustCompile(`^macosx_(\d+)_(\d+)_`).FindStringSubmatch(plat)
		tagMajor, _ := strconv.Atoi(m[1])
		tagMinor, _ := strconv.Atoi(m[2])
		minos := uint32(0)
		for _, l := range f.Loads {
			raw := l.Raw()
			if len(raw) >= 16 && f.ByteOrder.Uint32(raw) == 0x32 { // LC_BUILD_VERSION
				minos = binary.LittleEndian.Uint32(raw[12:])
			}
		}
		if minos == 0 {
			t.Fatal("the binary has no LC_BUILD_VERSION")
		}
		major, minor := int(minos>>16), int(minos>>8&0xff)
		if major > tagMajor || major == tagMajor && minor > tagMinor {
			t.Errorf("the binary needs macOS %d.%d; the tag %s promises %d.%d", major, minor, plat, tagMajor, tagMinor)
		}
		if major != tagMajor || minor != tagMinor {
			t.Logf("the binary runs on macOS %d.%d, older than the tag's %d.%d", major, minor, tagMajor, tagMinor)
		}
	case "windows":
		f, err := pe.NewFile(r)
		if err != nil {
			t.Fatalf("not a PE file: %v", err)
		}
		if f.Machine != pe.IMAGE_FILE_MACHINE_AMD64 {
			t.Errorf("PE machine %#x, want AMD64", f.Machine)
		}
		oh, ok := f.OptionalHeader.(*pe.OptionalHeader64)
		if !ok || oh.Subsystem != pe.IMAGE_SUBSYSTEM_WINDOWS_CUI {
			t.Errorf("PE optional header %T: not a 64-bit console program", f.OptionalHeader)
		}
	}
}

// checkSdist checks the source distribution: the Python API, its
// metadata, and the README's way to build the rest from source, and no
// binary.
func checkSdist(t *testing.T, path, version string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	gz, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{}
	tr := tar.NewReader(gz)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Typeflag != tar.TypeReg {
			continue
		}
		b, _ := io.ReadAll(tr)
		files[strings.TrimPrefix(h.Name, "ipybox-"+version+"/")] = b
	}
	for _, name := range []string{"PKG-INFO", "README.md", "LICENSE", "pyproject.toml", "setup.py", "ipybox/__init__.py", "ipybox/code_exec.py"} {
		if _, ok := files[name]; !ok {
			t.Errorf("the sdist lacks %s", name)
		}
	}
	if !bytes.Contains(files["PKG-INFO"], []byte("\nVersion: "+version+"\n")) {
		t.Errorf("the sdist's PKG-INFO does not say version %s", version)
	}
	if !bytes.Contains(files["README.md"], []byte("## Building from source")) {
		t.Error("the sdist's README does not say how to build from source")
	}
	for name := range files {
		if strings.Contains(name, "_bin") || filepath.Base(name) == "ipybox" {
			t.Errorf("the sdist holds %s", name)
		}
	}
}

// venvPython returns a Python 3.10 or newer that can make a virtualenv
// with pip in it, from the candidates ipybox itself would look at.
func venvPython(t *testing.T) string {
	t.Helper()
	for _, c := range []string{"python3", testenv.NeedsPython(t), "/usr/bin/python3"} {
		// sys.executable: a pyenv shim on PATH runs only with pyenv's PATH.
		out, err := exec.Command(c, "-c", "import sys, venv, ensurepip; assert sys.version_info >= (3, 10); print(sys.executable)").Output()
		if err == nil && strings.TrimSpace(string(out)) != "" {
			return strings.TrimSpace(string(out))
		}
	}
	testenv.Missing(t, "a Python 3.10+ with venv and ensurepip (apt-get install python3-venv)")
	return ""
}

// cleanEnv is this process's environment without IPYBOX_BIN and with
// PATH set to path.
func cleanEnv(path string, extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); k != "IPYBOX_BIN" && k != "PATH" && !strings.HasPrefix(k, "PIP_") && !strings.HasPrefix(k, "PIPX_") {
			env = append(env, kv)
		}
	}
	return append(append(env, "PATH="+path), extra...)
}

// run runs name with args in dir and env, and returns its combined output.
func run(t *testing.T, dir string, env []string, name string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir, cmd.Env = dir, env
	cmd.WaitDelay = 10 * time.Second
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %q: %v\n%s", name, args, err, out)
	}
	return string(out)
}

// inspectorMCP drives the MCP server that the client config's command and
// args start, as a client would, with the MCP Inspector's CLI from dir:
// tools/list, then a cell. env is the client's environment.
func inspectorMCP(t *testing.T, dir string, env []string, server map[string]any) {
	t.Helper()
	node := testenv.NPMBin(t, "node")
	insp := testenv.NPMBin(t, "inspector")
	cfg := filepath.Join(t.TempDir(), "mcp.json")
	b, _ := json.Marshal(map[string]any{"mcpServers": map[string]any{"ipybox": server}})
	if err := os.WriteFile(cfg, b, 0o600); err != nil {
		t.Fatal(err)
	}
	call := func(args ...string) string {
		ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, node, append([]string{insp, "--cli", "--config", cfg, "--server", "ipybox"}, args...)...)
		cmd.Dir, cmd.Env = dir, env
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		if err := cmd.Run(); err != nil {
			t.Fatalf("inspector %s %q: %v\nstdout: %s\nstderr: %s", b, args, err, out.String(), errb.String())
		}
		return out.String()
	}
	var list struct {
		Tools []struct{ Name string } `json:"tools"`
	}
	out := call("--method", "tools/list")
	if err := json.Unmarshal([]byte(out), &list); err != nil {
		t.Fatalf("tools/list: %v\n%s", err, out)
	}
	var names []string
	for _, tool := range list.Tools {
		names = append(names, tool.Name)
	}
	if !slices.Contains(names, "execute_ipython_cell") || !slices.Contains(names, "register_mcp_server") {
		t.Errorf("tools/list: %v", names)
	}
	var res struct {
		Content []struct{ Text string } `json:"content"`
		IsError bool                    `json:"isError"`
	}
	out = call("--method", "tools/call", "--tool-name", "execute_ipython_cell", "--tool-arg", "code=import sys; print(6 * 7)")
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("tools/call: %v\n%s", err, out)
	}
	if res.IsError || len(res.Content) != 1 || res.Content[0].Text != "42" {
		t.Errorf("execute_ipython_cell print(6 * 7) = %s", out)
	}
	t.Logf("MCP over stdio from %q %q: tools %v; print(6 * 7) -> %q", server["command"], server["args"], names, res.Content)
}

// readmeExample is python/README.md's Python example: a cell that calls
// the everything server's echo tool, approved by the application.
func readmeExample(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(testenv.RepoRoot(t), "python", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("(?s)```python\n(.*?)```").FindSubmatch(b)
	if m == nil {
		t.Fatal("python/README.md has no python example")
	}
	return string(m[1])
}

// checkPythonAPI runs the README's example with py, an interpreter the
// wheel was installed for, and checks that the package finds the binary
// it installed (want) even with another ipybox first on PATH, and with
// no IPYBOX_BIN.
func checkPythonAPI(t *testing.T, py, want, path string) {
	t.Helper()
	ws := t.TempDir()
	other := filepath.Dir(testenv.Binary(t)) // another ipybox, first on PATH
	env := cleanEnv(other + string(os.PathListSeparator) + path)
	out := run(t, ws, env, py, "-c", "from ipybox import find_binary; print(find_binary())")
	if got := strings.TrimSpace(out); got != want {
		t.Errorf("find_binary() = %q, want the installed %q", got, want)
	}
	out = run(t, ws, env, py, "-c", readmeExample(t))
	if !strings.Contains(out, "approving everything.echo(message='hi')") || !strings.Contains(out, "Echo: hi") {
		t.Errorf("the README's example printed:\n%s", out)
	}
	t.Logf("%s -c <python/README.md's example> (a tool call, approved):\n%s", py, strings.TrimSpace(out))
}

// hostWheel is the wheel this machine installs.
func hostWheel(t *testing.T) string {
	t.Helper()
	for _, w := range wheelTargets {
		if w.goos == runtime.GOOS && w.goarch == runtime.GOARCH {
			return wheelPath(wheelDir(t), checkoutVersion(t), w.plat)
		}
	}
	t.Skipf("ipybox builds no wheel for %s/%s", runtime.GOOS, runtime.GOARCH)
	return ""
}

// npmPath is PATH for the installs' runs: the npm test servers (and node)
// first, then the system's directories.
func npmPath(t *testing.T) string {
	t.Helper()
	bin := filepath.Dir(testenv.NPMBin(t, "mcp-server-everything"))
	return bin + string(os.PathListSeparator) + "/usr/local/bin:/usr/bin:/bin"
}

// TestWheelVenv installs this machine's wheel into a fresh virtualenv
// with pip, offline (--no-index), as `pip install ipybox` does: ipybox is
// on the venv's PATH as the binary itself, `ipybox mcp` serves the MCP
// Inspector, the Python API runs the README's example with its own
// binary, and pip uninstall leaves nothing behind.
func TestWheelVenv(t *testing.T) {
	t.Parallel()
	whl := hostWheel(t)
	version := checkoutVersion(t)
	py := venvPython(t)
	path := npmPath(t)
	venv := filepath.Join(t.TempDir(), "venv")
	env := cleanEnv(path)
	run(t, "", env, py, "-m", "venv", venv)
	vbin := filepath.Join(venv, "bin")
	run(t, "", env, filepath.Join(vbin, "pip"), "install", "--no-index", "--disable-pip-version-check", "-q", whl)

	exe := filepath.Join(vbin, "ipybox")
	checkInstalledBinary(t, exe, whl, version)
	out := run(t, "", env, filepath.Join(vbin, "python"), "-c", "import ipybox; print(ipybox.__version__)")
	if got := strings.TrimSpace(out); got != version {
		t.Errorf("ipybox.__version__ = %q, want %q", got, version)
	}

	// A client's config as the seed has it, with ipybox on PATH.
	venvPath := vbin + string(os.PathListSeparator) + path
	inspectorMCP(t, t.TempDir(), cleanEnv(venvPath), map[string]any{"command": "ipybox", "args": []string{"mcp"}})
	checkPythonAPI(t, filepath.Join(vbin, "python"), exe, venvPath)

	run(t, "", env, filepath.Join(vbin, "pip"), "uninstall", "-y", "-q", "ipybox")
	if _, err := os.Lstat(exe); !os.IsNotExist(err) {
		t.Errorf("after pip uninstall, %s: %v", exe, err)
	}
	left, _ := filepath.Glob(filepath.Join(venv, "lib", "python3*", "site-packages", "ipybox*"))
	if len(left) > 0 {
		t.Errorf("after pip uninstall: %v", left)
	}
}

// checkInstalledBinary checks that exe is the wheel's binary itself, byte
// for byte (no shim, nothing rewritten), and says version.
func checkInstalledBinary(t *testing.T, exe, whl, version string) {
	t.Helper()
	got, err := os.ReadFile(exe)
	if err != nil {
		t.Fatal(err)
	}
	zr, err := zip.OpenReader(whl)
	if err != nil {
		t.Fatal(err)
	}
	defer zr.Close()
	want := readZip(t, &zr.Reader, "ipybox-"+version+".data/scripts/ipybox")
	if !bytes.Equal(got, want) {
		t.Errorf("%s (%d bytes, starts %q) is not the wheel's binary", exe, len(got), got[:min(len(got), 16)])
	}
	out := run(t, "", cleanEnv("/usr/bin:/bin"), exe, "version")
	if f := strings.Fields(out); len(f) < 2 || f[1] != version {
		t.Errorf("%s version = %q, want %s", exe, out, version)
	}
	t.Logf("%s", strings.TrimSpace(out))
}

// TestWheelPipx runs this machine's wheel the way `uvx ipybox mcp` runs
// the published one, with pipx (uvx's offline stand-in here: both make a
// cached venv for the package and exec its script): `pipx run --spec
// WHEEL ipybox mcp` serves the MCP Inspector, the Python API in pipx's
// venv finds that venv's binary, and `pipx install` then `pipx uninstall`
// put ipybox on PATH and take it away again.
func TestWheelPipx(t *testing.T) {
	t.Parallel()
	whl := hostWheel(t)
	version := checkoutVersion(t)
	pipx := testenv.NeedsTool(t, "pipx")
	path := npmPath(t)
	home := t.TempDir()
	pipxBin := filepath.Join(home, "bin")
	pipxEnv := map[string]string{
		"PIPX_HOME": filepath.Join(home, "pipx"), "PIPX_BIN_DIR": pipxBin,
		// Offline, with no index to ask: pipx's upgrade of its shared pip
		// fails at once (and is not fatal) instead of retrying a network.
		"PIP_NO_INDEX": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1",
	}
	var extra []string
	for k, v := range pipxEnv {
		extra = append(extra, k+"="+v)
	}
	slices.Sort(extra)
	env := cleanEnv(filepath.Dir(pipx)+string(os.PathListSeparator)+path, extra...)

	// The seed's configuration, {"command": "uvx", "args": ["ipybox", "mcp"]},
	// with pipx run and the wheel as the spec.
	inspectorMCP(t, t.TempDir(), env, map[string]any{
		"command": pipx, "args": []string{"run", "--spec", whl, "ipybox", "mcp"}, "env": pipxEnv,
	})
	pys, _ := filepath.Glob(filepath.Join(home, "pipx", ".cache", "*", "bin", "python"))
	if len(pys) != 1 {
		t.Fatalf("pipx run's venvs: %v, want one", pys)
	}
	venvBin := filepath.Dir(pys[0])
	checkInstalledBinary(t, filepath.Join(venvBin, "ipybox"), whl, version)
	checkPythonAPI(t, pys[0], filepath.Join(venvBin, "ipybox"), path)

	run(t, "", env, pipx, "install", whl)
	linked := filepath.Join(pipxBin, "ipybox")
	checkInstalledBinary(t, linked, whl, version)
	run(t, "", env, pipx, "uninstall", "ipybox")
	if _, err := os.Lstat(linked); !os.IsNotExist(err) {
		t.Errorf("after pipx uninstall, %s: %v", linked, err)
	}
	if _, err := os.Stat(filepath.Join(home, "pipx", "venvs", "ipybox")); !os.IsNotExist(err) {
		t.Errorf("after pipx uninstall, its venv: %v", err)
	}
}

package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/ipybox/ipybox/internal/testenv"
)

var update = flag.Bool("update", false, "rewrite golden files")

// TestMain lets the test binary stand in for the ipybox binary: with
// IPYBOX_TEST_AS_MAIN=1 it runs main() (tier 4 tests drive it as a real
// process, and the sandbox re-executes it as its init).
func TestMain(m *testing.M) {
	// The sandbox re-executes this binary as its init with a cleared
	// environment, so that case is recognised by its argument.
	if os.Getenv("IPYBOX_TEST_AS_MAIN") == "1" || hiddenCommand(os.Args) != nil {
		main()
		return
	}
	// The approval policy and its log default to the user's config folder:
	// the tests, and the binaries they run, get one of their own.
	cfg, err := os.MkdirTemp("", "ipybox-cmd-test-config-")
	if err != nil {
		panic(err)
	}
	os.Setenv("XDG_CONFIG_HOME", cfg)
	code := m.Run()
	os.RemoveAll(cfg)
	if mcpWS.dir != "" {
		os.RemoveAll(mcpWS.dir)
	}
	os.Exit(code)
}

// ipybox runs the binary with args and stdin, returning stdout, stderr and
// the exit code.
func runBinary(t *testing.T, stdin string, args ...string) (string, string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 120*1e9)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], args...)
	cmd.Env = append(os.Environ(), "IPYBOX_TEST_AS_MAIN=1")
	cmd.Stdin = strings.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return out.String(), errb.String(), code
}

func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name+".golden")
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("missing golden file %s (run go test ./cmd/ipybox -update): %v", path, err)
	}
	if got != string(want) {
		t.Errorf("%s is stale (run go test ./cmd/ipybox -update):\n--- got\n%s\n--- want\n%s", path, got, want)
	}
}

func TestHelpGolden(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	env := &cliEnv{stdin: strings.NewReader(""), stdout: &out, stderr: &out, getenv: os.Getenv}
	if code := run(context.Background(), env, []string{"help"}); code != 0 {
		t.Fatalf("help: exit %d", code)
	}
	golden(t, "help", out.String())
	for _, c := range commands() {
		out.Reset()
		if code := run(context.Background(), env, []string{c.name, "-h"}); code != 0 {
			t.Errorf("%s -h: exit %d", c.name, code)
		}
		golden(t, "help-"+c.name, out.String())
		// Flags of more than a letter with two dashes, as the docs write
		// them (issue 35.8: the flag package printed one).
		if m := regexp.MustCompile(`(?m)^  -[A-Za-z0-9]{2,}`).FindString(out.String()); m != "" {
			t.Errorf("%s -h lists %q with one dash", c.name, m)
		}
	}
}

// TestUsageErrors: a bad command line gets one line that names the flag
// as it is written and the fix (a "did you mean" for a typo, a unit for
// a bare number), never the whole usage, and exit 2. Golden:
// testdata/usage-errors.golden.
func TestUsageErrors(t *testing.T) {
	t.Parallel()
	var all strings.Builder
	for _, args := range [][]string{
		{"nope"},
		{"--works", "ws"}, // not one of its flags
		{"exec", "--timout", "5s"},
		{"exec", "--workspac", "ws"},
		{"exec", "--no-such-flag"},
		{"exec", "--timeout", "5"},
		{"exec", "--timeout", "soon"},
		{"exec", "--timeout"},
		{"exec", "--json=maybe"},
		{"exec", "-c", "1", "file.py"},
		{"exec", "a.py", "b.py"},
		{"mcp", "--max-session", "3"},
		{"mcp", "--pool", "many"},
		{"mcp", "--http"},
		{"mcp", "--workspace", "ws-never-made", "--approval", "bogus"}, // refused before the workspace is made
		{"mcp", "--http", "127.0.0.1:0", "--auth-token-file", "no-such.tok"},
		{"mcp", "--session-idle-timeout", "30"},
		{"apigen", "--nme", "x"},
		{"doctor", "--pyton", "/usr/bin/python3"},
	} {
		var out bytes.Buffer
		env := &cliEnv{stdin: strings.NewReader(""), stdout: &out, stderr: &out, getenv: os.Getenv}
		code := run(context.Background(), env, args)
		if code != exitUsage {
			t.Errorf("%q: exit %d, want %d", args, code, exitUsage)
		}
		if n := strings.Count(out.String(), "\n"); n != 1 {
			t.Errorf("%q: %d lines, want 1:\n%s", args, n, out.String())
		}
		fmt.Fprintf(&all, "$ ipybox %s\n%sexit %d\n\n", strings.Join(args, " "), out.String(), code)
	}
	golden(t, "usage-errors", all.String())
}

// TestUpstreamCommandLine: upstream ipybox 0.9's console script was its
// MCP server, run with its flags first (`uvx ipybox --workspace DIR`, as
// its plugin ran it); such a line runs ipybox mcp, saying so on stderr
// (stdout is the MCP stream).
func TestUpstreamCommandLine(t *testing.T) {
	for _, args := range [][]string{{"--log-level", "loud"}, {"--workspace=" + t.TempDir(), "--log-level", "loud"}, {"--sandbox-config", "/nonexistent/srt.json"}} {
		var stdout, stderr bytes.Buffer
		env := &cliEnv{stdin: strings.NewReader(""), stdout: &stdout, stderr: &stderr, getenv: os.Getenv}
		code := run(context.Background(), env, args)
		first, rest, _ := strings.Cut(stderr.String(), "\n")
		if want := "running `ipybox mcp " + strings.Join(args, " ") + "`"; !strings.Contains(first, want) {
			t.Errorf("%q: first line %q, want it to say %s", args, first, want)
		}
		// mcp's own check of the flag's value answers, not "unknown command".
		if code != exitUsage || !strings.Contains(rest, "ipybox mcp: --") || stdout.Len() != 0 {
			t.Errorf("%q: exit %d, stdout %q, stderr:\n%s", args, code, stdout.String(), stderr.String())
		}
	}
}

// TestPythonErrors: --python names the flag, and tells a program that is
// not a Python from a Python without ipykernel.
func TestPythonErrors(t *testing.T) {
	t.Parallel()
	testenv.NeedsPython(t)
	for _, cmd := range []string{"exec", "mcp"} {
		// /bin/true exits 0 on any arguments: it is no more a Python.
		for _, py := range []string{"/bin/false", "/bin/true"} {
			_, errOut, code := runBinary(t, "", cmd, "--python", py, "--workspace", t.TempDir())
			if code != exitUsage || !strings.HasPrefix(errOut, "ipybox "+cmd+": --python "+py+": not a Python 3 that runs") ||
				strings.Contains(errOut, "pip install") || strings.Contains(errOut, "Options.") {
				t.Errorf("%s --python %s: exit %d, %q", cmd, py, code, errOut)
			}
		}
	}
}

func TestExecBinary(t *testing.T) {
	t.Parallel()
	testenv.NeedsPython(t)
	ws := t.TempDir()
	// Cells run in order in one kernel; stderr stays on stderr.
	out, errOut, code := runBinary(t, "", "exec", "--workspace", ws, "-c", "x = 20", "-c", "import sys\nprint(x + 1)\nprint('warn', file=sys.stderr)", "-c", "x * 2")
	if code != 0 || out != "21\n40\n" || errOut != "warn\n" {
		t.Errorf("cells: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	// A file, then standard input.
	file := filepath.Join(ws, "cell.py")
	os.WriteFile(file, []byte("print('from file')"), 0o644)
	if out, _, code := runBinary(t, "", "exec", file); code != 0 || out != "from file\n" {
		t.Errorf("file: exit %d, stdout %q", code, out)
	}
	if out, _, code := runBinary(t, "print('from stdin')", "exec"); code != 0 || out != "from stdin\n" {
		t.Errorf("stdin: exit %d, stdout %q", code, out)
	}
	// A Python error: traceback on stderr, exit 1, later cells not run,
	// and that said.
	out, errOut, code = runBinary(t, "", "exec", "-c", "print('before')", "-c", "def f():\n    1/0\nf()", "-c", "print('never')")
	if code != 1 || out != "before\n" || !strings.Contains(errOut, "ZeroDivisionError") || !strings.Contains(errOut, "f()") ||
		!strings.HasSuffix(errOut, "\nipybox exec: cell 2 of 3 failed; the cell after it was not run\n") {
		t.Errorf("error: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	// A timeout.
	_, errOut, code = runBinary(t, "", "exec", "--timeout", "300ms", "-c", "import time; time.sleep(5)")
	if code != 1 || !strings.Contains(errOut, "timed out") {
		t.Errorf("timeout: exit %d, stderr %q", code, errOut)
	}
}

func TestExecJSONAndImages(t *testing.T) {
	t.Parallel()
	testenv.NeedsPython(t)
	ws, imgs := t.TempDir(), t.TempDir()
	out, _, code := runBinary(t, "", "exec", "--json", "--workspace", ws, "--images-dir", imgs,
		"-c", "print('a')\nimport matplotlib.pyplot as plt\nplt.plot([1, 2]); plt.show()\n7", "-c", "print('partial')\nraise KeyError('k')")
	if code != 1 {
		t.Errorf("exit %d, want 1", code)
	}
	var events []map[string]any
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		var ev map[string]any
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			t.Fatalf("not a JSON line: %q", sc.Text())
		}
		events = append(events, ev)
	}
	var types []string
	for _, ev := range events {
		types = append(types, ev["type"].(string))
	}
	// A failing cell ends in its error event alone (it was a result,
	// then an error).
	if got := strings.Join(types, ","); got != "output,display,display,result,output,error" {
		t.Fatalf("event types = %s\n%s", got, out)
	}
	img := events[1]["images"].([]any)[0].(string)
	if filepath.Dir(img) != imgs {
		t.Errorf("image %s not in %s", img, imgs)
	}
	if b, err := os.ReadFile(img); err != nil || !bytes.HasPrefix(b, []byte("\x89PNG")) {
		t.Errorf("image %s: %v", img, err)
	}
	if events[2]["result"] != true || events[2]["text"] != "7" {
		t.Errorf("execute_result event = %v", events[2])
	}
	if e := events[5]; e["kind"] != "python" || e["name"] != "KeyError" || e["cell"] != 1.0 || e["text"] != "partial" {
		t.Errorf("error event = %v", e)
	}
}

func TestDoctor(t *testing.T) {
	t.Parallel()
	testenv.NeedsPython(t)
	out, _, code := runBinary(t, "", "doctor")
	if code != 0 || !strings.Contains(out, "ipykernel") {
		t.Errorf("doctor: exit %d\n%s", code, out)
	}
	// The kernel's stack is named by its versions (Debian's and PyPI's
	// differ: issue 37).
	for _, re := range []string{`(?m)^ok\s+python\s+\S+ \(Python 3\.\d+\.\d+\)$`, `(?m)^ok\s+ipykernel\s+\d+\.\d+`, `(?m)^ok\s+jupyter_client\s+\d+\.\d+`} {
		if !regexp.MustCompile(re).MatchString(out) {
			t.Errorf("doctor's output does not match %s:\n%s", re, out)
		}
	}
	// Not a Python: named by its flag, exit 1.
	out, _, code = runBinary(t, "", "doctor", "--python", "/bin/false")
	if code != 1 || !strings.Contains(out, "--python /bin/false: not a Python 3") {
		t.Errorf("doctor with a bad python: exit %d\n%s", code, out)
	}
	// A Python without ipykernel: the fix is named.
	venv := filepath.Join(t.TempDir(), "venv")
	if err := exec.Command(testenv.NeedsPython(t), "-m", "venv", "--without-pip", venv).Run(); err != nil {
		testenv.Missing(t, "python -m venv: %v", err)
	}
	out, _, code = runBinary(t, "", "doctor", "--python", filepath.Join(venv, "bin", "python"))
	if code != 1 || !strings.Contains(out, "cannot import ipykernel") || !strings.Contains(out, "-m pip install ipykernel") {
		t.Errorf("doctor with a python without ipykernel: exit %d\n%s", code, out)
	}
}

func TestVersion(t *testing.T) {
	t.Parallel()
	out, _, code := runBinary(t, "", "version")
	if code != 0 || !strings.HasPrefix(out, "ipybox ") {
		t.Errorf("version: exit %d, %q", code, out)
	}
}

// TestConfigSyntaxErrorsSayWhere: a JSON syntax error in --mcp-config or
// --sandbox-config names the line and column to open the file at.
func TestConfigSyntaxErrorsSayWhere(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "bad.json")
	if err := os.WriteFile(bad, []byte("{\n \"mcpServers\": {\n  \"x\": {\"command\": \"y\",}\n }\n}"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, flag := range []string{"--mcp-config", "--sandbox-config"} {
		var out bytes.Buffer
		env := &cliEnv{stdin: strings.NewReader(""), stdout: &out, stderr: &out, getenv: os.Getenv}
		code := run(context.Background(), env, []string{"mcp", flag, bad})
		if code != exitUsage || !strings.Contains(out.String(), bad+": line 3, column 24: ") {
			t.Errorf("%s: exit %d:\n%s", flag, code, out.String())
		}
	}
}

package kernel

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ipybox/ipybox/internal/lifeline"
	"github.com/ipybox/ipybox/internal/testenv/ci"
)

// TestPyScriptsCompile compiles each program that ipybox hands to Python,
// as assembled, and each file it came from, with the interpreter the
// kernels use: a syntax error in an embedded file fails here, not in a
// kernel's start.
func TestPyScriptsCompile(t *testing.T) {
	if testing.Short() {
		t.Skip("tier 3 test: needs Python")
	}
	py, err := FindPython(context.Background(), "")
	if err != nil {
		ci.Missing(t, "%v", err)
	}
	programs := map[string]string{
		"launchShim":   launchShim(),
		"zygoteScript": zygoteScript(),
		"boundStreams": boundStreams(),
		"lifeline":     lifeline.WatchPython,
	}
	files, _ := filepath.Glob("py/*.py")
	for _, f := range append(files, "../container/shim.py", "../lifeline/watch.py") {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		programs[f] = string(b)
	}
	for name, src := range programs {
		cmd := exec.Command(py, "-c", "import sys; compile(sys.stdin.read(), sys.argv[1], 'exec')", name)
		cmd.Stdin = strings.NewReader(src)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("%s does not compile: %v\n%s", name, err, out)
		}
	}
}

// TestPyScriptAssembly checks what pyScript makes of the files: every
// include expanded, no comment left to lengthen the command line, and the
// pieces in the order that the launch needs.
func TestPyScriptAssembly(t *testing.T) {
	for name, src := range map[string]string{"launchShim": launchShim(), "zygoteScript": zygoteScript()} {
		if strings.Contains(src, includeMark) {
			t.Errorf("%s keeps an include line", name)
		}
		body := strings.TrimPrefix(src, ZygoteMarker+"\n")
		for line := range strings.Lines(body) {
			if s := strings.TrimSpace(line); s == "" || strings.HasPrefix(s, "#") {
				t.Errorf("%s keeps a blank or comment line: %q", name, line)
			}
		}
	}
	if !strings.HasPrefix(zygoteScript(), ZygoteMarker+"\n") {
		t.Errorf("zygote script does not start with its marker")
	}
	order := []string{"del sys.path[0]", "_ipybox_lifeline()", `_b = ("debugpy", "jedi")`, "from ipykernel import kernelapp", "del _b, _m, _e", "_ipybox_bound_streams()", "_app.launch_new_instance()"}
	at := 0
	for _, s := range order {
		i := strings.Index(launchShim()[at:], s)
		if i < 0 {
			t.Fatalf("launchShim: %q missing or out of order (after byte %d)", s, at)
		}
		at += i + len(s)
	}
	if !strings.Contains(lifeline.WatchPython, `"`+lifeline.EnvVar+`"`) {
		t.Errorf("watch.py does not read %s", lifeline.EnvVar)
	}
}

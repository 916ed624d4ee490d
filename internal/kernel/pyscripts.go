package kernel

import (
	"embed"
	"fmt"
	"strings"

	"github.com/ipybox/ipybox/internal/lifeline"
)

// The Python that ipybox runs before a kernel's own code lives in py/, as
// files that Python tools can read and check; see each file's header.
//
//go:embed py/*.py
var pyFiles embed.FS

var (
	// launchShim starts ipykernel (py/launch.py).
	launchShim = pyScript("launch.py")
	// zygoteScript is the fork server (py/zygote.py), marked so that
	// process listings can tell it and its kernels.
	zygoteScript = ZygoteMarker + "\n" + pyScript("zygote.py")
	// sandboxZygoteScript is the sandbox fork server (py/sbzygote.py).
	sandboxZygoteScript = ZygoteMarker + "\n" + pyScript("sbzygote.py")
	// boundStreams is py/boundstreams.py, alone: a remote kernel gets it
	// as init code, since its server, not launchShim, launched it.
	boundStreams = pyScript("boundstreams.py")
)

// includeMark starts a line that pyScript replaces with the named file of
// py/, or with lifeline.WatchPython for "lifeline".
const includeMark = "#ipybox:include "

// pyScript returns the file name of py/ as a program for `python -c`:
// include lines expanded, and comment-only and blank lines dropped, since
// the program travels in the command line. The files hold no multi-line
// strings, so no such line is data. A missing file is a build defect, and
// panics at init.
func pyScript(name string) string {
	b, err := pyFiles.ReadFile("py/" + name)
	if err != nil {
		panic(fmt.Sprintf("kernel: embedded script %s: %v", name, err))
	}
	var out strings.Builder
	for line := range strings.Lines(string(b)) {
		trimmed := strings.TrimSpace(line)
		switch {
		case strings.HasPrefix(line, includeMark):
			inc := strings.TrimSpace(strings.TrimPrefix(line, includeMark))
			if inc == "lifeline" {
				out.WriteString(lifeline.WatchPython)
			} else {
				out.WriteString(pyScript(inc))
			}
		case trimmed == "" || strings.HasPrefix(trimmed, "#"):
		default:
			out.WriteString(line)
		}
	}
	return out.String()
}

// IsLaunch reports whether args (a Spec's, after the interpreter) are the
// ones Start gives ipykernel: a sandbox fork server then launches the
// kernel app itself, as the zygote does, instead of running the shim.
func IsLaunch(args []string) bool {
	return len(args) >= 2 && args[0] == "-c" && args[1] == launchShim
}

package kernel

import (
	"embed"
	"fmt"
	"strings"
	"sync"

	"github.com/ipybox/ipybox/internal/lifeline"
	"github.com/ipybox/ipybox/internal/pyruntime"
)

// The Python that ipybox runs before a kernel's own code lives in py/, as
// files that Python tools can read and check; see each file's header.
//
//go:embed py/*.py
var pyFiles embed.FS

// The programs are assembled when first used, not at package init: the
// sandbox's init is the same binary, runs in every sandbox, and needs
// none of them (they were a third of the heap its package init allocated).
var (
	// launchShim starts ipykernel (py/launch.py).
	launchShim = sync.OnceValue(func() string { return pyScript("launch.py") })
	// zygoteScript is the fork server (py/zygote.py), marked so that
	// process listings can tell it and its kernels.
	zygoteScript = sync.OnceValue(func() string { return ZygoteMarker + "\n" + pyScript("zygote.py") })
	// sandboxZygoteScript is the sandbox fork server (py/sbzygote.py).
	sandboxZygoteScript = sync.OnceValue(func() string { return ZygoteMarker + "\n" + pyScript("sbzygote.py") })
	// boundStreams is py/boundstreams.py, alone: a remote kernel gets it
	// as init code, since its server, not launchShim, launched it.
	boundStreams = sync.OnceValue(func() string { return pyScript("boundstreams.py") })
)

// includeMark starts a line that pyScript replaces with the named file of
// py/, with lifeline.WatchPython for "lifeline", or with
// pyruntime.Preload for "kernelinit".
const includeMark = "#ipybox:include "

// pyScript returns the file name of py/ as a program for `python -c`:
// include lines expanded, and comment-only and blank lines dropped, since
// the program travels in the command line. The files hold no multi-line
// strings, so no such line is data. A missing file is a build defect, and
// panics when first used (TestPyScriptsCompile assembles each program).
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
			switch inc {
			case "lifeline":
				out.WriteString(lifeline.WatchPython)
			case "kernelinit":
				out.WriteString(pyruntime.Preload())
			default:
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
	return len(args) >= 2 && args[0] == "-c" && args[1] == launchShim()
}

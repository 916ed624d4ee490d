package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"strings"
	"time"

	"github.com/ipybox/ipybox"
	"github.com/ipybox/ipybox/internal/container"
	"github.com/ipybox/ipybox/kernel"
)

const doctorUsage = `
Usage: ipybox doctor [flags]

Checks what ipybox needs on this host (a Python with ipykernel, matplotlib,
pydantic and numpy, bubblewrap for the sandbox, and Docker with the ipybox
image for the container backend) and says how to install what is missing. Exit status 1 when something required is missing.
`

// check is one line of the doctor's report.
type check struct {
	name     string
	ok       bool
	required bool
	detail   string // the version or path when ok, the fix when not
}

// sandboxProbe reports whether the sandbox can run here; the sandbox
// package sets it (nil: only bwrap's presence is checked).
var sandboxProbe func(ctx context.Context) error

// sandboxInfo describes the limits and the uid the sandbox uses here.
var sandboxInfo func() string

func doctorCommand() *command {
	return &command{name: "doctor", summary: "check the host for Python, ipykernel and bubblewrap", run: runDoctor}
}

func runDoctor(ctx context.Context, env *cliEnv, args []string) int {
	fs := newFlagSet(env, "doctor", doctorUsage)
	python := fs.String("python", "", "check this Python `interpreter` instead of the discovered one")
	if done, code := parseFlags(fs, env, args); done {
		return code
	}
	checks := doctorChecks(ctx, *python)
	failed := false
	for _, c := range checks {
		mark := "ok     "
		if !c.ok {
			mark = "missing"
			if c.required {
				failed = true
			} else {
				mark = "warning"
			}
		}
		fmt.Fprintf(env.stdout, "%s  %-12s %s\n", mark, c.name, c.detail)
	}
	if failed {
		return exitFail
	}
	return exitOK
}

const aptHint = "install with `apt-get install %s` (or `pip install %s` into the kernel's Python)"

func doctorChecks(ctx context.Context, python string) []check {
	var checks []check
	py, err := kernel.FindPython(ctx, python)
	if err != nil {
		checks = append(checks, check{name: "python", required: true, detail: err.Error()})
	} else {
		checks = append(checks, check{name: "python", ok: true, required: true, detail: py})
		versions := pythonModules(ctx, py, "ipykernel", "matplotlib", "pydantic", "numpy")
		for _, m := range []struct {
			mod, deb string
			required bool
		}{
			{"ipykernel", "python3-ipykernel", true},
			{"matplotlib", "python3-matplotlib", false},
			{"pydantic", "python3-pydantic", true}, // generated tool modules need it
			{"numpy", "python3-numpy", false},
		} {
			v, ok := versions[m.mod]
			c := check{name: m.mod, ok: ok, required: m.required, detail: v}
			if !ok {
				c.detail = fmt.Sprintf(aptHint, m.deb, m.mod)
			}
			checks = append(checks, c)
		}
	}
	bwrap, err := exec.LookPath("bwrap")
	switch {
	case err != nil:
		checks = append(checks, check{name: "bwrap", detail: "needed only for --sandbox; install with `apt-get install bubblewrap`"})
	case sandboxProbe != nil:
		if perr := sandboxProbe(ctx); perr != nil {
			checks = append(checks, check{name: "sandbox", detail: perr.Error() +
				"; without it, ipybox mcp runs kernels unsandboxed (with a warning) and exec --sandbox fails"})
		} else {
			detail := "bwrap at " + bwrap + "; user and network namespaces work; ipybox mcp sandboxes kernels by default"
			if sandboxInfo != nil {
				detail += "; " + sandboxInfo()
			}
			checks = append(checks, check{name: "sandbox", ok: true, detail: detail})
		}
	default:
		checks = append(checks, check{name: "bwrap", ok: true, detail: bwrap})
	}
	return append(checks, dockerCheck(ctx))
}

// dockerCheck reports the container backend: the daemon, the default
// image, and kernel containers left by owners that exited.
func dockerCheck(ctx context.Context) check {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	c := check{name: "docker"}
	if err := containerProbe(ctx, &ipybox.ContainerConfig{}); err != nil {
		c.detail = "needed only for --container-tag: " + err.Error()
		return c
	}
	c.ok = true
	c.detail = "daemon answers; image " + ipybox.DefaultContainerImage + " present"
	names, orphaned, err := container.Leftovers(ctx, "")
	if err != nil {
		return c
	}
	var left []string
	for i, n := range names {
		if orphaned[i] {
			left = append(left, n)
		}
	}
	c.detail += fmt.Sprintf("; %d kernel container(s) running", len(names)-len(left))
	if len(left) > 0 {
		c.ok = false
		c.detail += fmt.Sprintf("; %d left by exited owners (%s): the next container start removes them, or docker rm -f them", len(left), strings.Join(left, " "))
	}
	return c
}

// pythonModules returns the versions of the modules py can import.
func pythonModules(ctx context.Context, py string, mods ...string) map[string]string {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	script := `import importlib, json, sys
out = {}
for m in sys.argv[1:]:
    try:
        mod = importlib.import_module(m)
        out[m] = str(getattr(mod, "__version__", getattr(mod, "VERSION", "?")))
    except Exception:
        pass
print(json.dumps(out))`
	b, err := exec.CommandContext(ctx, py, append([]string{"-c", script}, mods...)...).Output()
	out := map[string]string{}
	if err == nil {
		json.Unmarshal([]byte(strings.TrimSpace(string(b))), &out)
	}
	return out
}

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"time"

	"github.com/ipybox/ipybox"
	"github.com/ipybox/ipybox/internal/container"
	"github.com/ipybox/ipybox/internal/hostproc"
	"github.com/ipybox/ipybox/internal/kernel"
	"github.com/ipybox/ipybox/internal/pyinstall"
)

const doctorUsage = `
Usage: ipybox doctor [flags]

Checks what ipybox needs on this host (a Python with ipykernel, matplotlib,
pydantic and numpy; for the sandbox, bubblewrap on Linux and sandbox-exec
on macOS; Docker with the ipybox image for the container backend) and says
how to install what is missing. Exit status 1 when something required is
missing.
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

// sandboxProtections lists what protects the host from kernel code here.
var sandboxProtections func() []string

func doctorCommand() *command {
	return &command{name: "doctor", summary: "check the host for Python, ipykernel and the sandbox", run: runDoctor}
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

func doctorChecks(ctx context.Context, python string) []check {
	var checks []check
	// The current folder is where kernels usually write (the default
	// workspace): no interpreter there runs on the host (invariant 14).
	cwd, _ := os.Getwd()
	py, err := kernel.FindPython(ctx, "", cwd)
	if python != "" {
		py, err = kernel.CheckPython(ctx, python, "--python", cwd)
		if err == nil && hostproc.ProgramInside(py, []string{cwd}) != "" {
			err = fmt.Errorf("--python %s is in the current folder, where kernels write (a virtualenv there): doctor does not run it on the host; a sandboxed kernel runs it in the sandbox", python)
		}
	}
	if err != nil {
		checks = append(checks, check{name: "python", required: true, detail: err.Error()})
	} else {
		versions := pythonModules(ctx, py, "ipykernel", "jupyter_client", "matplotlib", "pydantic", "numpy", "dill")
		detail := py
		if v := versions["sys"]; v != "" {
			detail += " (Python " + v + ")"
		}
		checks = append(checks, check{name: "python", ok: true, required: true, detail: detail})
		for _, m := range []struct {
			mod      string
			required bool
		}{
			{"ipykernel", true},
			{"jupyter_client", true}, // ipykernel's; its version says which kernel stack this is
			{"matplotlib", false},
			{"pydantic", true}, // generated tool modules need it
			{"numpy", false},
			{"dill", false}, // durable sessions save the kernel's variables with it
		} {
			v, ok := versions[m.mod]
			c := check{name: m.mod, ok: ok, required: m.required, detail: v}
			if !ok {
				c.detail = pyinstall.Hint(runtime.GOOS, m.mod)
			}
			checks = append(checks, c)
		}
	}
	sb := sandboxCheck(ctx, runtime.GOOS, exec.LookPath, sandboxProbe)
	checks = append(checks, sb, dockerCheck(ctx))
	if image, ok := imageChecks(os.Getenv); ok {
		// In the image kernels run in the container, without the
		// sandbox: its protections are not the ones that hold.
		return append(checks, image...)
	}
	return append(checks, protectionChecks(sb.ok, os.Getenv("IPYBOX_IN_IMAGE") == "1", sandboxProtections)...)
}

// protectionChecks are the lines of the sandbox's protections: each as
// it is here when the sandbox runs; when it cannot (the image, which has
// no bwrap and runs --no-sandbox), one line that says none applies, not
// a list of protections marked ok that no kernel has.
func protectionChecks(sandboxOK, inImage bool, list func() []string) []check {
	if list == nil {
		return nil
	}
	if !sandboxOK {
		detail := "none of the sandbox's applies: the sandbox cannot run here, and kernels run unsandboxed"
		if inImage {
			detail = "none of the sandbox's applies: the image runs kernels with --no-sandbox, and the container is the boundary (docs/container.md)"
		}
		return []check{{name: "protection", detail: detail}}
	}
	var checks []check
	for _, p := range list() {
		missing := strings.HasPrefix(p, "MISSING: ")
		checks = append(checks, check{name: "protection", ok: !missing, detail: strings.TrimPrefix(p, "MISSING: ")})
	}
	return checks
}

// sandboxCheck is the doctor's line about the sandbox on the system goos:
// the tool it needs (found with lookPath), and whether probe (nil: not
// asked) says it runs.
func sandboxCheck(ctx context.Context, goos string, lookPath func(string) (string, error), probe func(context.Context) error) check {
	var tool, install string
	switch goos {
	case "linux":
		tool, install = "bwrap", "install with `apt-get install bubblewrap`"
	case "darwin":
		tool, install = "sandbox-exec", "it ships with macOS at /usr/bin/sandbox-exec; restore it or put /usr/bin on PATH"
	default:
		return check{name: "sandbox", detail: "ipybox has no sandbox on " + goos +
			": exec --sandbox fails, and ipybox mcp runs kernels unsandboxed (with a warning)"}
	}
	path, err := lookPath(tool)
	switch {
	case err != nil:
		return check{name: tool, detail: "needed only for the sandbox; " + install}
	case probe != nil:
		if perr := probe(ctx); perr != nil {
			return check{name: "sandbox", detail: perr.Error() +
				"; without it, ipybox mcp runs kernels unsandboxed (with a warning) and exec --sandbox fails"}
		}
		detail := tool + " at " + path
		if goos == "linux" {
			detail += "; user and network namespaces work"
		}
		detail += "; ipybox mcp sandboxes kernels by default"
		if sandboxInfo != nil {
			detail += "; " + sandboxInfo()
		}
		return check{name: "sandbox", ok: true, detail: detail}
	}
	return check{name: tool, ok: true, detail: path}
}

// dockerCheck reports the container backend: the daemon, the default
// image, and kernel containers left by owners that exited.
func dockerCheck(ctx context.Context) check {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	c := check{name: "docker"}
	if err := containerProbe(ctx, &ipybox.ContainerConfig{}, nil); err != nil {
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

// pythonModules returns the versions of the modules py can import, and
// the interpreter's own as "sys" ("3.11.2").
func pythonModules(ctx context.Context, py string, mods ...string) map[string]string {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	script := `import importlib, json, sys
out = {"sys": "%d.%d.%d" % sys.version_info[:3]}
for m in sys.argv[1:]:
    try:
        mod = importlib.import_module(m)
        out[m] = str(getattr(mod, "__version__", getattr(mod, "VERSION", "?")))
    except Exception:
        pass
print(json.dumps(out))`
	cmd := exec.CommandContext(ctx, py, append([]string{"-c", script}, mods...)...)
	// Not in the working folder, the workspace often: -c would import a
	// module the kernel wrote there in place of the one asked about
	// (invariant 14). The kernel's own basic variables, no more.
	cmd.Env = hostproc.Env([]string{"PATH", "HOME", "LANG", "PYENV_ROOT", "PYENV_VERSION", "SYSTEMROOT", "LOCALAPPDATA", "USERPROFILE"}, hostproc.PythonSafePath)
	if _, err := hostproc.Prepare(cmd, nil); err != nil {
		return map[string]string{}
	}
	// Killed at the deadline, a wrapper's child may keep stdout open.
	cmd.WaitDelay = time.Second
	b, err := cmd.Output() // bound: ctx (30s), then WaitDelay
	out := map[string]string{}
	if err == nil {
		json.Unmarshal([]byte(strings.TrimSpace(string(b))), &out)
	}
	return out
}

package kernel

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// ErrNoPython is returned (wrapped) when no interpreter that can import
// ipykernel was found.
var ErrNoPython = errors.New("no Python interpreter with ipykernel found")

// probeTimeout bounds one "can this interpreter import ipykernel" check.
const probeTimeout = 10 * time.Second

var probeCache sync.Map // path -> error (nil: usable)

// FindPython returns the interpreter the kernel should run.
//
// The order is: explicit (Options.Python), then $IPYBOX_PYTHON, then every
// python3 on PATH, then /usr/bin/python3. The first one that can import
// ipykernel wins. An explicit choice that cannot import ipykernel is an error
// of its own; it is never silently replaced by another interpreter.
func FindPython(ctx context.Context, explicit string) (string, error) {
	if explicit != "" {
		return checkChosen(ctx, explicit, "Options.Python / --python")
	}
	if env := os.Getenv("IPYBOX_PYTHON"); env != "" {
		return checkChosen(ctx, env, "$IPYBOX_PYTHON")
	}
	// Probe every candidate at once (each costs an interpreter start; a
	// pyenv shim costs more), then take the first that works, in order.
	cs := candidates()
	errs := make([]error, len(cs))
	var wg sync.WaitGroup
	for i, c := range cs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = probe(ctx, c)
		}()
	}
	wg.Wait()
	for i, c := range cs {
		if errs[i] == nil {
			return c, nil
		}
	}
	if err := ctx.Err(); err != nil {
		// Cut short (the caller went away): no verdict on the Pythons.
		return "", fmt.Errorf("looking for a Python with ipykernel: %w", err)
	}
	tried := cs
	return "", fmt.Errorf("%w (tried %s); install it with `apt-get install python3-ipykernel` "+
		"(or `pip install ipykernel`), or point ipybox at an interpreter that has it with "+
		"--python, Options.Python or $IPYBOX_PYTHON", ErrNoPython, strings.Join(tried, ", "))
}

func checkChosen(ctx context.Context, p, source string) (string, error) {
	abs, err := resolve(p)
	if err != nil {
		return "", fmt.Errorf("python %q from %s: %w", p, source, err)
	}
	if err := probe(ctx, abs); err != nil {
		if ctx.Err() != nil {
			return "", fmt.Errorf("python %q from %s: %w", p, source, ctx.Err())
		}
		return "", fmt.Errorf("python %q from %s cannot import ipykernel (%v); "+
			"install it there (`%s -m pip install ipykernel`, or `apt-get install python3-ipykernel` "+
			"for Debian's /usr/bin/python3) or choose another interpreter", p, source, err, abs)
	}
	return abs, nil
}

func resolve(p string) (string, error) {
	if !strings.Contains(p, "/") {
		return exec.LookPath(p)
	}
	abs, err := filepath.Abs(p)
	if err != nil {
		return "", err
	}
	if _, err := os.Stat(abs); err != nil {
		return "", err
	}
	return abs, nil
}

// candidates lists every python3 on PATH in order, then /usr/bin/python3,
// without duplicates.
func candidates() []string {
	var out []string
	seen := map[string]bool{}
	add := func(p string) {
		if p == "" || seen[p] {
			return
		}
		seen[p] = true
		out = append(out, p)
	}
	for _, dir := range filepath.SplitList(os.Getenv("PATH")) {
		if dir == "" {
			continue
		}
		p := filepath.Join(dir, "python3")
		if st, err := os.Stat(p); err == nil && !st.IsDir() && st.Mode()&0o111 != 0 {
			add(p)
		}
	}
	add("/usr/bin/python3")
	return out
}

func probe(ctx context.Context, python string) error {
	if v, ok := probeCache.Load(python); ok {
		if v == nil {
			return nil
		}
		return v.(error)
	}
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	// find_spec locates the package without importing it (an import of
	// ipykernel costs a tenth of a second); a broken installation still
	// shows, with its traceback, when the kernel starts.
	cmd := exec.CommandContext(ctx, python, "-c",
		"import importlib.util, sys; sys.exit(0 if importlib.util.find_spec('ipykernel') else 'No module named ipykernel')")
	cmd.Env = minimalEnv()
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		return fmt.Errorf("probe: %w", ctx.Err()) // not cached: may be transient
	}
	if err != nil {
		msg := strings.TrimSpace(string(out))
		if i := strings.LastIndexByte(msg, '\n'); i >= 0 {
			msg = msg[i+1:]
		}
		err = fmt.Errorf("%v: %s", err, msg)
		probeCache.Store(python, err)
		return err
	}
	probeCache.Store(python, nil)
	return nil
}

// minimalEnv is the environment for short helper processes: enough to find
// programs and decode text, nothing secret.
func minimalEnv() []string {
	var env []string
	for _, k := range []string{"PATH", "HOME", "LANG", "PYENV_ROOT", "PYENV_VERSION"} {
		if v, ok := os.LookupEnv(k); ok {
			env = append(env, k+"="+v)
		}
	}
	return env
}

package seccomp

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ipybox/ipybox/internal/testenv/ci"
)

// The test binary runs as the guarded runner when IPYBOX_SECCOMP_RUN is
// set: it starts its arguments under the filter (with a guard for the
// policy in that variable's JSON, when not "-") and exits with their
// status. The tests themselves stay unrestricted.
func TestMain(m *testing.M) {
	if spec := os.Getenv("IPYBOX_SECCOMP_RUN"); spec != "" {
		os.Exit(runGuarded(spec, os.Args[1:]))
	}
	os.Exit(m.Run())
}

func runGuarded(spec string, argv []string) int {
	o := StartOptions{Log: func(s string) { fmt.Fprintln(os.Stderr, s) }}
	if spec != "-" {
		var pol Policy
		if err := json.Unmarshal([]byte(spec), &pol); err != nil {
			fmt.Fprintln(os.Stderr, "bad policy:", err)
			return 125
		}
		o.Filter.Guard, o.Guard = true, &pol
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.Env = append(os.Environ(), "IPYBOX_SECCOMP_RUN=")
	if err := Start(cmd, o); err != nil {
		fmt.Fprintln(os.Stderr, "start:", err)
		return 125
	}
	err := cmd.Wait()
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode()
	}
	if err != nil {
		return 125
	}
	return 0
}

// run runs argv under the filter with pol (nil: no guard) and returns its
// output and exit code.
func run(t *testing.T, pol *Policy, dir string, argv ...string) (stdout, stderr string, code int) {
	t.Helper()
	spec := "-"
	if pol != nil {
		b, err := json.Marshal(pol)
		if err != nil {
			t.Fatal(err)
		}
		spec = string(b)
	}
	cmd := exec.Command(os.Args[0], argv...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "IPYBOX_SECCOMP_RUN="+spec)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	cmd.WaitDelay = 5 * time.Second
	timer := time.AfterFunc(2*time.Minute, func() { cmd.Process.Kill() })
	defer timer.Stop()
	err := cmd.Run()
	code = 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("run %v: %v", argv, err)
	}
	if code == 125 {
		t.Fatalf("the runner failed: %s", errb.String())
	}
	return out.String(), errb.String(), code
}

// python returns Debian's python3 (or another on PATH with os and tarfile).
func python(t *testing.T) string {
	t.Helper()
	for _, p := range []string{"/usr/bin/python3", "python3"} {
		if path, err := exec.LookPath(p); err == nil {
			return path
		}
	}
	ci.Missing(t, "python3 not on PATH; run scripts/setup.sh")
	return ""
}

// setugidFiles lists the files below dir with a setuid or setgid bit.
func setugidFiles(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	err := walkAll(dir, func(p string, st *syscall.Stat_t) {
		if st.Mode&(syscall.S_ISUID|syscall.S_ISGID) != 0 {
			out = append(out, fmt.Sprintf("%s %o", strings.TrimPrefix(p, dir), st.Mode))
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func walkAll(dir string, f func(string, *syscall.Stat_t)) error {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range ents {
		p := dir + "/" + e.Name()
		var st syscall.Stat_t
		if err := syscall.Lstat(p, &st); err != nil {
			return err
		}
		f(p, &st)
		if e.IsDir() {
			if err := walkAll(p, f); err != nil {
				return err
			}
		}
	}
	return nil
}

package sandbox

import (
	"fmt"
	"os"
	"strings"
)

// initEnv is the environment of every process that ipybox runs before a
// sandboxed program is confined: bwrap, the prep and hold steps, the init
// check, the probe's bwrap, the sandbox's init (pid 1, through bwrap's
// --clearenv) and the limit step. It is constructed, and empty: nothing of
// ipybox's own environment, nor of a program's (a registered server's env
// is the client's), reaches code that runs as host root, or in the sandbox
// before the seccomp filter, the guard and Landlock are in place. The
// dynamic loader's variables (LD_PRELOAD, LD_AUDIT, LD_LIBRARY_PATH), the
// C library's (GCONV_PATH, GLIBC_TUNABLES, MALLOC_*, LOCPATH) and Go's
// runtime's (GODEBUG, GOTRACEBACK) would otherwise choose code or
// behaviour there. The program's environment (programEnv) travels in the
// init's configuration and is applied at the program's exec alone.
func initEnv() []string { return []string{} }

// lookPathIn finds a program name that has no slash on the PATH of env
// (not the caller's own).
func lookPathIn(name string, env []string) (string, error) {
	if strings.Contains(name, "/") {
		return name, nil
	}
	for _, dir := range strings.Split(envValue(env, "PATH"), ":") {
		if dir == "" || !strings.HasPrefix(dir, "/") {
			continue
		}
		p := dir + "/" + name
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s: executable file not found in the program's PATH", name)
}

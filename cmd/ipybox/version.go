package main

import (
	"context"
	"fmt"
	"runtime"
	"runtime/debug"
)

// version is set at build time with -ldflags "-X main.version=v1.2.3";
// otherwise the module version (or "devel") is reported.
var version = ""

func versionString() string {
	v := version
	if v == "" {
		v = "devel"
		if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			v = bi.Main.Version
		}
	}
	return fmt.Sprintf("ipybox %s (%s %s/%s)", v, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}

func versionCommand() *command {
	return &command{name: "version", summary: "print the version", run: func(ctx context.Context, env *cliEnv, args []string) int {
		fs := newFlagSet(env, "version", "Usage: ipybox version\n\nPrints ipybox's version.")
		if done, code := parseFlags(fs, env, args); done {
			return code
		}
		fmt.Fprintln(env.stdout, versionString())
		return exitOK
	}}
}

package main

import (
	"os"
	"strings"
)

// takeEnv returns the value of the environment variable name and removes
// it from this process: from Go's copy of the environment, so that no
// child inherits it and no ${VAR} expands to it, and, where the system
// shows it (/proc/PID/environ on Linux), from the initial environment
// block too, which os.Unsetenv leaves as it was. Use it for secrets.
func takeEnv(env *cliEnv, name string) string {
	// A copy: Go's strings of the environment point into the block.
	v := strings.Clone(env.getenv(name))
	os.Unsetenv(name)
	scrubInitialEnv(name)
	return v
}

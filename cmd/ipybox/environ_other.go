//go:build !linux

package main

// scrubInitialEnv has nothing to do where no /proc/PID/environ shows the
// initial environment.
func scrubInitialEnv(string) {}

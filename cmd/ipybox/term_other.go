//go:build !linux

package main

import "os"

// isTerminal reports whether f may be a terminal: whether it is a character
// device. /dev/null is one too: escaping what goes there costs nothing,
// while raw output on a terminal lets kernel code drive it.
func isTerminal(f *os.File) bool {
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

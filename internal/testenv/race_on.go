//go:build race

package testenv

// Race reports whether the race detector is on. Its runtime keeps shadow
// memory for everything allocated, so resident memory says nothing about
// the program's own: tests that bound memory measure the Go heap then.
const Race = true

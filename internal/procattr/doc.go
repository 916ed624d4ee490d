// Package procattr holds the process attributes ipybox starts children
// with: each in its own process group (so that a signal reaches what it
// started too), and, where the system has it, killed when ipybox dies.
package procattr

// Package procattr holds the process attributes ipybox starts helper
// children with: each in its own process group (so that a signal reaches
// what it started too), and, on Linux, killed when ipybox dies. Kernels
// use internal/lifeline instead, which works on every system.
package procattr

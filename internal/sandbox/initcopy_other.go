//go:build !linux

package sandbox

// privateInit returns src: only Linux runs the init binary.
func privateInit(src string, self bool) (string, error) { return src, nil }

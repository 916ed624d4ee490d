//go:build !linux

package sandbox

// privateInit returns src: only Linux runs the init binary.
func privateInit(src string, self bool, writable []string) (string, error) { return src, nil }

//go:build !linux

package kernel

import "errors"

// Adopt fails on this system: a fork of a live kernel needs Linux.
func Adopt(pid int) (HostProcess, error) {
	return nil, errors.New("kernel: adopting a forked kernel needs Linux")
}

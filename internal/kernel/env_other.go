//go:build !windows

package kernel

// platformEnv adds nothing outside Windows.
func platformEnv() []string { return nil }

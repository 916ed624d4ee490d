//go:build !linux

package telemetry

// treeRSS is known on Linux only.
func treeRSS(int) (int64, bool) { return 0, false }

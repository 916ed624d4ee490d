//go:build unix

package safefs

import (
	"io/fs"
	"syscall"
)

// allocated returns the disk fi's file takes (its blocks), or its length
// when the system does not say.
func allocated(fi fs.FileInfo) int64 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return int64(st.Blocks) * 512
	}
	return fi.Size()
}

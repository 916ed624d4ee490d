//go:build unix

package ipybox

import (
	"os"
	"syscall"
)

// readNow reads what f (a pipe of os.Pipe, non-blocking) holds now,
// without waiting: 0 when it is empty.
func readNow(f *os.File, buf []byte) int {
	rc, err := f.SyscallConn()
	if err != nil {
		return 0
	}
	n := 0
	rc.Read(func(fd uintptr) bool {
		n, _ = syscall.Read(int(fd), buf)
		return true // never wait
	})
	return max(n, 0)
}

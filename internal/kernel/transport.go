package kernel

import (
	"fmt"
	"path/filepath"
	"runtime"

	"github.com/ipybox/ipybox/internal/jupyter"
	"github.com/ipybox/ipybox/internal/safefs"
)

// ipcSupported says whether the kernel's ZeroMQ sockets are ipc (unix
// sockets in the private run directory): everywhere but Windows, where
// jupyter_client and ipykernel use TCP, and so does ipybox: on 127.0.0.1,
// with the connection key signing every message (see
// jupyter.NewTCPConnection for what that leaves open).
var ipcSupported = runtime.GOOS != "windows"

// newConnection returns the connection info for a new kernel process
// whose own files are in socketDir.
func (k *Kernel) newConnection(socketDir string) (*jupyter.ConnectionInfo, error) {
	if k.opts.tcp || !ipcSupported {
		return jupyter.NewTCPConnection()
	}
	info, err := jupyter.NewIPCConnection(socketDir)
	if err != nil {
		return nil, err
	}
	// Sockets of an earlier instance must not be reused.
	for p := 1; p <= 5; p++ {
		safefs.Remove(socketDir, fmt.Sprintf("%s-%d", filepath.Base(info.IP), p))
	}
	return info, nil
}

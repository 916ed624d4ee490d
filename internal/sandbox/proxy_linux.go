package sandbox

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
)

// listenProxy listens for the egress proxy on a unix socket in the private
// directory; the sandbox's init forwards 127.0.0.1:ProxyPort inside to it.
func (s *Sandbox) listenProxy() (net.Listener, error) {
	sock := filepath.Join(s.privDir, "proxy.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		return nil, err
	}
	if s.mapped {
		// The sandbox's MappedID connects to it; the private directory
		// (0700) keeps everyone else out.
		if err := os.Chmod(sock, 0o666); err != nil {
			ln.Close()
			return nil, err
		}
	}
	return ln, nil
}

func forwardURL(f Forward) string { return fmt.Sprintf("http://127.0.0.1:%d", f.Port) }

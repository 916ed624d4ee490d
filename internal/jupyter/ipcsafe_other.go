//go:build !linux

package jupyter

import (
	"context"
	"fmt"
	"net"
	"os"

	"github.com/go-zeromq/zmq4/transport"
)

// dialNoFollow connects to the unix socket at path after checking that it
// is one (not a link); there is no descriptor-based connect here, so a
// swap between the check and the connect is still possible.
func dialNoFollow(ctx context.Context, d transport.Dialer, path string) (net.Conn, error) {
	fi, err := os.Lstat(path)
	if err != nil {
		return nil, &net.OpError{Op: "dial", Net: "unix", Err: err}
	}
	if fi.Mode()&os.ModeSocket == 0 {
		return nil, fmt.Errorf("jupyter: %s is not a socket; refusing to connect", path)
	}
	return d.DialContext(ctx, "unix", path)
}

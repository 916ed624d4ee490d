package jupyter

import (
	"context"
	"fmt"
	"net"
	"strings"

	"github.com/go-zeromq/zmq4"
	"github.com/go-zeromq/zmq4/transport"
)

// The kernel binds its ipc sockets in a directory it can write (inside the
// sandbox, the only writable part of the run directory), so it could put
// a symbolic link where a socket should be, and have the host connect,
// and send its messages, to another socket of the host. ipcsafe is the
// "ipc" transport without that: each dial opens the path without following
// a link, checks that it is a socket, and connects through the descriptor.
const safeIPC = "ipcsafe"

func init() {
	if err := zmq4.RegisterTransport(safeIPC, safeIPCTransport{}); err != nil {
		panic(err)
	}
}

type safeIPCTransport struct{}

func (safeIPCTransport) Dial(ctx context.Context, d transport.Dialer, addr string) (net.Conn, error) {
	return dialNoFollow(ctx, d, addr)
}

func (safeIPCTransport) Listen(ctx context.Context, addr string) (net.Listener, error) {
	return nil, fmt.Errorf("jupyter: the %s transport only dials", safeIPC)
}

func (safeIPCTransport) Addr(ep string) (string, error) { return ep, nil }

// dialEndpoint is the endpoint the host dials for port: ipc endpoints go
// through ipcsafe.
func (c *ConnectionInfo) dialEndpoint(port int) string {
	ep := c.Endpoint(port)
	if rest, ok := strings.CutPrefix(ep, "ipc://"); ok {
		return safeIPC + "://" + rest
	}
	return ep
}

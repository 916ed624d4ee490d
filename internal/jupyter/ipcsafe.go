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
//
// Both ipcsafe and tcpsafe (plain TCP) hand zmq4 the connection through a
// guard (guard.go) that bounds what the kernel can make the host hold.
const (
	safeIPC = "ipcsafe"
	safeTCP = "tcpsafe"
)

func init() {
	for name, dial := range map[string]func(context.Context, transport.Dialer, string) (net.Conn, error){
		safeIPC: dialNoFollow,
		safeTCP: func(ctx context.Context, d transport.Dialer, addr string) (net.Conn, error) {
			return d.DialContext(ctx, "tcp", addr)
		},
	} {
		if err := zmq4.RegisterTransport(name, guardedTransport{name, dial}); err != nil {
			panic(err)
		}
	}
}

// guardedTransport dials with dial and guards what it dialled.
type guardedTransport struct {
	name string
	dial func(context.Context, transport.Dialer, string) (net.Conn, error)
}

func (t guardedTransport) Dial(ctx context.Context, d transport.Dialer, addr string) (net.Conn, error) {
	conn, err := t.dial(ctx, d, addr)
	if err != nil {
		return nil, err
	}
	return guard(ctx, conn), nil
}

func (t guardedTransport) Listen(ctx context.Context, addr string) (net.Listener, error) {
	return nil, fmt.Errorf("jupyter: the %s transport only dials", t.name)
}

func (guardedTransport) Addr(ep string) (string, error) { return ep, nil }

// dialEndpoint is the endpoint the host dials for port: ipc endpoints go
// through ipcsafe, tcp ones through tcpsafe.
func (c *ConnectionInfo) dialEndpoint(port int) string {
	ep := c.Endpoint(port)
	for from, to := range map[string]string{"ipc://": safeIPC + "://", "tcp://": safeTCP + "://"} {
		if rest, ok := strings.CutPrefix(ep, from); ok {
			return to + rest
		}
	}
	return ep
}

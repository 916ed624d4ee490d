package gateway

import (
	"net"

	"golang.org/x/sys/unix"
)

// quickAck wraps a TCP connection so that every read re-arms TCP_QUICKACK:
// the host acknowledges what it received at once instead of up to 40 ms
// later. Jupyter Server writes each kernel message to the websocket as its
// own small segment with Nagle's algorithm on (tornado's default), so
// each segment after the first waits for the host's acknowledgement of
// the one before: with delayed ACKs, a `pass` cell took 44 ms on loopback.
// Linux clears the flag by itself, hence once per read.
func quickAck(c net.Conn) net.Conn {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return c
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return c
	}
	return &quickAckConn{TCPConn: tc, rc: rc}
}

type quickAckConn struct {
	*net.TCPConn
	rc interface {
		Control(func(fd uintptr)) error
	}
}

func (c *quickAckConn) Read(p []byte) (int, error) {
	n, err := c.TCPConn.Read(p)
	c.rc.Control(func(fd uintptr) {
		unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_QUICKACK, 1)
	})
	return n, err
}

package testenv

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"syscall"
	"testing"
)

// Network is an in-memory network for tests that run in a testing/synctest
// bubble: a goroutine blocked on a real socket keeps the bubble's clock
// from moving, one blocked on a net.Pipe does not. Its listeners have
// loopback addresses (127.0.0.1 and a made-up port) or unix socket paths,
// and its connections report them as their addresses, so URLs and Host
// checks look as they would on a real socket; its dialer reaches them in
// memory and anything else over the real network (such as a listener the
// code under test opens itself).
//
// Make a Network, its listeners and their servers inside the bubble.
type Network struct {
	mu    sync.Mutex
	next  int
	addrs map[string]*memListener // by network:address
}

// NewNetwork returns an empty network.
func NewNetwork() *Network { return &Network{next: 40000, addrs: map[string]*memListener{}} }

// Listen returns a listener on a fresh address of the network.
func (n *Network) Listen() net.Listener {
	l, _ := n.ListenAddr("tcp", "127.0.0.1:0")
	return l
}

// ListenAddr is Listen with net.Listen's signature: address is
// "127.0.0.1:port" (port 0 for a fresh one) for network "tcp", a path for
// "unix". An address in use on the network is an error.
func (n *Network) ListenAddr(network, address string) (net.Listener, error) {
	var addr net.Addr
	switch network {
	case "tcp":
		host, p, err := net.SplitHostPort(address)
		port, perr := strconv.Atoi(p)
		if err != nil || perr != nil || host != "127.0.0.1" {
			return nil, &net.OpError{Op: "listen", Net: network, Err: fmt.Errorf("testenv.Network listens on 127.0.0.1:port, not %s", address)}
		}
		n.mu.Lock()
		if port == 0 {
			n.next++
			port = n.next
		}
		n.mu.Unlock()
		addr = &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: port}
	case "unix":
		addr = &net.UnixAddr{Name: address, Net: "unix"}
	default:
		return nil, &net.OpError{Op: "listen", Net: network, Err: errors.New("testenv.Network has tcp and unix only")}
	}
	key := network + ":" + addr.String()
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.addrs[key] != nil {
		return nil, &net.OpError{Op: "listen", Net: network, Addr: addr, Err: syscall.EADDRINUSE}
	}
	l := &memListener{n: n, key: key, addr: addr, conns: make(chan net.Conn), done: make(chan struct{})}
	n.addrs[key] = l
	return l, nil
}

// DialContext connects to a listener of the network, or over the real
// network to any other address.
func (n *Network) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	kind := network
	if kind == "tcp4" || kind == "tcp6" {
		kind = "tcp"
	}
	n.mu.Lock()
	l := n.addrs[kind+":"+address]
	var local net.Addr = &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 50000 + n.next}
	n.next++
	n.mu.Unlock()
	if l == nil {
		var d net.Dialer
		return d.DialContext(ctx, network, address)
	}
	if kind == "unix" {
		local = &net.UnixAddr{Net: "unix"}
	}
	client, server := net.Pipe()
	select {
	case l.conns <- &memConn{Conn: server, local: l.addr, remote: local}:
		return &memConn{Conn: client, local: local, remote: l.addr}, nil
	case <-l.done:
	case <-ctx.Done():
	}
	client.Close()
	server.Close()
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	return nil, &net.OpError{Op: "dial", Net: network, Err: syscall.ECONNREFUSED}
}

// Transport returns an HTTP transport that dials through the network.
func (n *Network) Transport() *http.Transport {
	return &http.Transport{DialContext: n.DialContext}
}

// Client returns an HTTP client that reaches the network's servers.
func (n *Network) Client() *http.Client { return &http.Client{Transport: n.Transport()} }

// Server starts an httptest.Server for h on the network; t's cleanup
// closes it.
func (n *Network) Server(t testing.TB, h http.Handler) *httptest.Server {
	t.Helper()
	srv := httptest.NewUnstartedServer(h)
	srv.Listener.Close()
	srv.Listener = n.Listen()
	srv.Start()
	t.Cleanup(srv.Close)
	return srv
}

type memListener struct {
	n         *Network
	key       string
	addr      net.Addr
	conns     chan net.Conn
	done      chan struct{}
	closeOnce sync.Once
}

func (l *memListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *memListener) Close() error {
	l.closeOnce.Do(func() {
		close(l.done)
		l.n.mu.Lock()
		delete(l.n.addrs, l.key)
		l.n.mu.Unlock()
	})
	return nil
}

func (l *memListener) Addr() net.Addr { return l.addr }

// memConn is one end of a net.Pipe with the addresses a socket would have.
type memConn struct {
	net.Conn
	local, remote net.Addr
}

func (c *memConn) LocalAddr() net.Addr  { return c.local }
func (c *memConn) RemoteAddr() net.Addr { return c.remote }

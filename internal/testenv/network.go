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
// loopback addresses (127.0.0.1 and a made-up port), so URLs look as they
// would over TCP; its dialer reaches them in memory and anything else over
// the real network (such as a listener the code under test opens itself).
//
// Make a Network, its listeners and their servers inside the bubble.
type Network struct {
	mu    sync.Mutex
	next  int
	addrs map[string]*memListener
}

// NewNetwork returns an empty network.
func NewNetwork() *Network { return &Network{next: 40000, addrs: map[string]*memListener{}} }

// Listen returns a listener on a fresh address of the network.
func (n *Network) Listen() net.Listener {
	l, _ := n.ListenAddr("tcp", "127.0.0.1:0")
	return l
}

// ListenAddr is Listen with net.Listen's signature: address is
// "127.0.0.1:port", port 0 for a fresh one. A port in use on the network
// is an error.
func (n *Network) ListenAddr(network, address string) (net.Listener, error) {
	host, p, err := net.SplitHostPort(address)
	port, perr := strconv.Atoi(p)
	if err != nil || perr != nil || host != "127.0.0.1" || network != "tcp" {
		return nil, &net.OpError{Op: "listen", Net: network, Err: fmt.Errorf("testenv.Network listens on tcp 127.0.0.1:port only, not %s %s", network, address)}
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if port == 0 {
		n.next++
		port = n.next
	}
	addr := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: port}
	if n.addrs[addr.String()] != nil {
		return nil, &net.OpError{Op: "listen", Net: network, Addr: addr, Err: syscall.EADDRINUSE}
	}
	l := &memListener{n: n, addr: addr, conns: make(chan net.Conn), done: make(chan struct{})}
	n.addrs[addr.String()] = l
	return l, nil
}

// DialContext connects to a listener of the network, or over the real
// network to any other address.
func (n *Network) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	n.mu.Lock()
	l := n.addrs[addr]
	n.mu.Unlock()
	if l == nil {
		var d net.Dialer
		return d.DialContext(ctx, network, addr)
	}
	client, server := net.Pipe()
	select {
	case l.conns <- server:
		return client, nil
	case <-l.done:
	case <-ctx.Done():
	}
	client.Close()
	server.Close()
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	return nil, &net.OpError{Op: "dial", Net: network, Err: errors.New("connection refused")}
}

// Transport returns an HTTP transport that dials through the network.
func (n *Network) Transport() *http.Transport {
	return &http.Transport{DialContext: n.DialContext, ForceAttemptHTTP2: false}
}

type memListener struct {
	n         *Network
	addr      *net.TCPAddr
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
		delete(l.n.addrs, l.addr.String())
		l.n.mu.Unlock()
	})
	return nil
}

func (l *memListener) Addr() net.Addr { return l.addr }

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

// Client returns an HTTP client that reaches the network's servers.
func (n *Network) Client() *http.Client { return &http.Client{Transport: n.Transport()} }

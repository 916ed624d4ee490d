package container

import (
	_ "embed"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"sync"
)

// shim is the first program in a kernel container, in the image's own
// python3 (so that any image with Python works):
//
//	python3 -c SHIM LIFELINE [--forward PORT SOCKET] -- KERNEL ARGS...
//
// It forks a watcher that holds a connection to the host's lifeline
// socket: when the host process dies, however it dies, the connection
// ends, and the watcher kills every process of the container, which then
// stops (the next start reaps it). With --forward it also forks a relay
// from 127.0.0.1:PORT to the unix socket SOCKET (the egress proxy). Both
// run in their own sessions, out of reach of the kernel's signals. Then it
// execs the kernel. Kernel code can kill either helper; that costs it its
// own network, or leaves its container to the reaper: the proxy's rules
// and the container's limits hold on the host.
//
//go:embed shim.py
var shim string

// lifeline is the host's end of the containers' watchers: a unix socket
// in the run directory whose connections are held open, never read or
// written, until Close (or the process's death) ends them.
type lifeline struct {
	mu     sync.Mutex
	path   string
	ln     net.Listener
	conns  map[net.Conn]struct{}
	closed bool
	wg     sync.WaitGroup
}

// lifeline returns the path of the lifeline socket in runDir, listening
// from the first call on, handed to the kernel's user under root.
func (l *Launcher) lifeline(runDir string) (string, error) {
	lf := &l.life
	lf.mu.Lock()
	defer lf.mu.Unlock()
	if lf.ln != nil {
		return lf.path, nil
	}
	path := filepath.Join(runDir, "life.sock")
	ln, err := net.Listen("unix", path)
	if err != nil {
		return "", fmt.Errorf("container lifeline: %w", err)
	}
	if os.Geteuid() == 0 {
		if err := os.Lchown(path, l.uid, l.gid); err != nil {
			ln.Close()
			return "", fmt.Errorf("container lifeline: %w", err)
		}
	}
	lf.path, lf.ln, lf.conns = path, ln, map[net.Conn]struct{}{}
	lf.wg.Add(1)
	go func() {
		defer lf.wg.Done()
		for {
			c, err := ln.Accept() // lifetime: the Launcher, until close closes ln
			if err != nil {
				return
			}
			lf.mu.Lock()
			if lf.closed {
				// Accepted as close ran, which did not see it: holding
				// it would hold close until its container ended.
				lf.mu.Unlock()
				c.Close()
				return
			}
			lf.conns[c] = struct{}{}
			lf.mu.Unlock()
			// Held until the container's watcher goes (its container
			// ended) or close.
			lf.wg.Add(1)
			go func() {
				defer lf.wg.Done()
				io.Copy(io.Discard, io.LimitReader(c, 1<<10))
				lf.mu.Lock()
				delete(lf.conns, c)
				lf.mu.Unlock()
				c.Close()
			}()
		}
	}()
	return path, nil
}

// close ends the listener and every held connection.
func (lf *lifeline) close() {
	lf.mu.Lock()
	lf.closed = true
	if lf.ln != nil {
		lf.ln.Close()
	}
	for c := range lf.conns {
		c.Close()
	}
	lf.mu.Unlock()
	lf.wg.Wait() // bound: close closed the listener and every held connection
}

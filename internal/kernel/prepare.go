package kernel

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"github.com/ipybox/ipybox/internal/jupyter"
	"github.com/ipybox/ipybox/internal/safefs"
)

// PrepareSpec returns a Spec for a copy of this kernel's process that
// binds a connection of its own (a kept cell boundary of ipybox's Rewind:
// bound and waiting, so that a rewind swaps it in without a start), and
// that connection. The connection file and the sockets are in a new
// folder of the kernel's socket directory; remove deletes it, once: call
// it when the copy has ended or will never start. The process, returned
// by a Launcher through RestartWith, must be Prepared with this
// connection.
func (k *Kernel) PrepareSpec() (spec *Spec, info *jupyter.ConnectionInfo, remove func(), err error) {
	if k.remote != nil {
		return nil, nil, nil, fmt.Errorf("kernel: a gateway kernel has no process to copy")
	}
	rel := filepath.Join("kernel", fmt.Sprintf("p%d", k.prepared.Add(1)))
	if err := safefs.MkdirAll(k.runDir, rel, 0o700); err != nil {
		return nil, nil, nil, fmt.Errorf("kernel directory: %w", err)
	}
	var once sync.Once
	remove = func() {
		once.Do(func() {
			if r, err := os.OpenRoot(k.runDir); err == nil {
				r.RemoveAll(rel)
				r.Close()
			}
		})
	}
	dir := filepath.Join(k.runDir, rel)
	if info, err = k.newConnection(dir); err != nil {
		remove()
		return nil, nil, nil, err
	}
	connFile := filepath.Join(dir, "kernel.json")
	if err := info.Write(connFile); err != nil {
		remove()
		return nil, nil, nil, fmt.Errorf("write connection file: %w", err)
	}
	spec = &Spec{
		Path: k.python, Args: launchArgs(connFile), Env: k.env(), Dir: k.opts.Dir,
		RunDir: k.runDir, SocketDir: dir, InitCode: k.opts.InitCode,
	}
	return spec, info, remove, nil
}

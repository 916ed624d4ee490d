package kernel

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"golang.org/x/sys/unix"
)

// NewSandboxZygote starts a sandbox fork server: a zygote whose children
// join a sandbox that bwrap has built, instead of running as kernels of
// the host (see py/sbzygote.py and internal/sandbox's fork_linux.go). It
// never receives anything of a session: a fork's memory, which it shares
// with its siblings until it writes, holds no other session's
// environment, token or path. Its Start refuses; Join is its one use. It
// runs python with -s (no user site: the kernel's site is the sandbox's)
// and env (nil: PATH, HOME, LANG), which forked kernels see in
// /proc/self/environ, so env must hold nothing secret.
func NewSandboxZygote(ctx context.Context, python string, env []string, log *slog.Logger) (*Zygote, error) {
	return newZygote(ctx, python, env, log, true)
}

// Join forks a child that joins the sandbox req names and forks the
// kernel there. It returns once the fork server has forked the child; the
// sandbox's init says whether the kernel started. The caller keeps and
// closes req's files.
func (z *Zygote) Join(ctx context.Context, req *JoinRequest) error {
	if !z.join {
		return errors.New("fork server: this one forks unsandboxed kernels; a sandbox needs NewSandboxZygote's")
	}
	z.mu.Lock()
	defer z.mu.Unlock()
	p, err := z.proc(ctx)
	if err != nil {
		return err
	}
	fds := make([]int, 0, len(req.Namespaces)+2)
	for _, f := range req.Namespaces {
		fds = append(fds, int(f.Fd()))
	}
	fds = append(fds, int(req.Setup.Fd()), int(req.Report.Fd()))
	p.mu.Lock()
	p.nextID++
	id := p.nextID
	reply := make(chan zygoteReply, 1)
	p.replies[id] = reply
	p.mu.Unlock()
	msg, err := json.Marshal(map[string]any{"id": id, "uid": req.UID, "gid": req.GID, "n": len(req.Namespaces)})
	if err == nil {
		err = unix.Sendmsg(int(p.ctl.Fd()), msg, unix.UnixRights(fds...), nil, 0)
	}
	if err != nil {
		p.mu.Lock()
		delete(p.replies, id)
		p.mu.Unlock()
		return fmt.Errorf("fork server: send the request: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	select {
	case rep := <-reply:
		if rep.Error != "" {
			return fmt.Errorf("fork server: %s", rep.Error)
		}
		return nil
	case <-p.dead:
		return errors.New("fork server: it exited while forking a kernel")
	case <-ctx.Done():
		return fmt.Errorf("fork server: waiting for a fork: %w", ctx.Err())
	case <-z.closed:
		return ErrClosed
	}
}

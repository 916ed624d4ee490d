package kernel

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/ipybox/ipybox/internal/gateway"
	"github.com/ipybox/ipybox/internal/jupyter"
)

// GatewayProtocol chooses the framing of a gateway kernel's websocket.
type GatewayProtocol int

const (
	// GatewayProtocolAuto (the zero value) offers the
	// v1.kernel.websocket.jupyter.org subprotocol and speaks the legacy
	// JSON frames when the server does not pick it.
	GatewayProtocolAuto GatewayProtocol = iota
	// GatewayProtocolLegacy offers no subprotocol: legacy JSON frames.
	GatewayProtocolLegacy
)

// GatewayConfig runs the kernel on a Jupyter server (Jupyter Server,
// Kernel Gateway or Enterprise Gateway) through its kernels API instead of
// as a local process. See docs/scale.md.
type GatewayConfig struct {
	// URL is the server's base URL, http:// or https:// (https checks the
	// certificate against the system's roots). Required.
	URL string
	// Token authenticates to the server ("Authorization: token ..."). It
	// is never logged, put in an error, or passed to the kernel. Empty
	// sends none.
	Token string
	// KernelName is the kernelspec to start. Empty means "python3".
	KernelName string
	// Protocol chooses the websocket framing. The zero value negotiates.
	Protocol GatewayProtocol
	// KernelID, when set, makes Start attach to this kernel, already
	// running on the server (one that Detach left, or that another front
	// end started), instead of starting one: its namespace is kept, the
	// init code is not run again, and only Env is set in it, so that it
	// reaches this host's tool server. A restart (Restart, or a death)
	// starts a fresh kernel as usual. Empty means a new kernel.
	KernelID string
}

// ErrNoKernel is returned by Start when GatewayConfig.KernelID names no
// kernel of the server (it was deleted or culled).
var ErrNoKernel = errors.New("kernel: the gateway has no kernel of that id (deleted, or culled for idleness)")

// remote is the gateway side of a Kernel.
type remote struct {
	c      *gateway.Client
	legacy bool
}

func newRemote(g *GatewayConfig) (*remote, error) {
	switch g.Protocol {
	case GatewayProtocolAuto, GatewayProtocolLegacy:
	default:
		return nil, fmt.Errorf("kernel: GatewayConfig.Protocol %d is unknown; use GatewayProtocolAuto or GatewayProtocolLegacy", g.Protocol)
	}
	c, err := gateway.New(gateway.Config{URL: g.URL, Token: g.Token, KernelName: g.KernelName})
	if err != nil {
		return nil, err
	}
	return &remote{c: c, legacy: g.Protocol == GatewayProtocolLegacy}, nil
}

// remoteProcess is a gateway kernel seen as a Process: SIGINT is a REST
// interrupt, Kill is a DELETE, Wait returns once the kernel is deleted.
type remoteProcess struct {
	c     *gateway.Client
	id    string
	grace time.Duration
	log   func(msg string, args ...any)

	once sync.Once
	done chan struct{}
	err  error
}

// ID implements Process: the kernel's id on the server.
func (p *remoteProcess) ID() string { return p.id }

// Signal implements Process: SIGINT is the REST interrupt; any other
// signal deletes the kernel.
func (p *remoteProcess) Signal(ctx context.Context, sig syscall.Signal) error {
	if sig != syscall.SIGINT {
		return p.Kill(ctx)
	}
	return p.c.Interrupt(ctx, p.id)
}

// release ends the process's hold on the kernel without deleting it: Wait
// returns, and a later Kill deletes nothing.
func (p *remoteProcess) release() {
	p.once.Do(func() { close(p.done) })
}

// Kill implements Process: it deletes the kernel on the server. The first
// Kill starts the DELETE, which goes on (bounded by the kernel's grace)
// when a caller's ctx ends; each call waits for it, or for its own ctx.
func (p *remoteProcess) Kill(ctx context.Context) error {
	p.once.Do(func() { go p.delete() })
	select {
	case <-p.done:
		return p.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// delete deletes the kernel, bounded. A server that is restarting the
// kernel (after it died) answers 500 until the restart is over: it
// retries, within the bound.
func (p *remoteProcess) delete() {
	defer close(p.done)
	ctx, cancel := context.WithTimeout(context.Background(), 3*p.grace)
	defer cancel()
	for pause := 50 * time.Millisecond; ; pause = min(2*pause, 500*time.Millisecond) {
		p.err = p.c.Delete(ctx, p.id)
		var he *gateway.HTTPError
		if !errors.As(p.err, &he) || he.Status < 500 {
			break // done, or an answer a retry will not change
		}
		select {
		case <-ctx.Done():
		case <-time.After(pause):
			continue
		}
		break
	}
	if p.err != nil {
		p.log("could not delete the gateway kernel", "kernel", p.id, "err", p.err)
	}
}

// Wait implements Process: the kernel is gone once it is deleted.
func (p *remoteProcess) Wait(ctx context.Context) error {
	select {
	case <-p.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// kernelVars are the KERNEL_* entries of env: what Enterprise Gateway
// passes to a kernel (and uses to place it) without an allow-list.
func kernelVars(env []string) map[string]string {
	out := map[string]string{}
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "KERNEL_") {
			out[k] = v
		}
	}
	return out
}

// envCode sets env in the kernel process's os.environ, silently, so that
// the session's environment reaches the kernel whatever the gateway
// forwards.
func envCode(env []string) string {
	m := map[string]string{}
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		m[k] = v
	}
	if len(m) == 0 {
		return ""
	}
	b, _ := json.Marshal(m)
	q, _ := json.Marshal(string(b))
	return fmt.Sprintf("__import__('os').environ.update(__import__('json').loads(%s))\n", q)
}

// spawnRemote starts a kernel on the gateway and connects to it. A start
// that fails or is cancelled deletes the kernel it created, even when the
// POST answers only after the caller gave up. The first spawn of a Kernel
// whose GatewayConfig names a KernelID attaches to that kernel instead.
func (k *Kernel) spawnRemote(ctx context.Context) (*instance, error) {
	ctx, cancel := context.WithTimeout(ctx, k.opts.StartTimeout)
	defer cancel()
	if id := k.attach; id != "" {
		k.attach = ""
		return k.attachRemote(ctx, id)
	}
	type started struct {
		id  string
		err error
	}
	// The POST runs on its own bounded context: a caller that gives up
	// does not lose track of a kernel the server is creating.
	// Exactly one of taken and abandoned is closed, by the caller.
	res := make(chan started, 1)
	taken, abandoned := make(chan struct{}), make(chan struct{})
	k.wg.Add()
	go func() {
		defer k.wg.Done()
		pctx, pcancel := context.WithTimeout(context.Background(), k.opts.StartTimeout)
		defer pcancel()
		id, err := k.remote.c.StartKernel(pctx, &gateway.StartRequest{Env: kernelVars(k.opts.Env)})
		res <- started{id, err} // bound: buffered
		// bound: the caller closes taken or abandoned, whichever way it goes
		select {
		case <-taken:
			return
		case <-abandoned:
		}
		// Nobody took it: delete what was created.
		if err == nil {
			dctx, dcancel := context.WithTimeout(context.Background(), 2*k.opts.ShutdownGrace)
			k.remote.c.Delete(dctx, id)
			dcancel()
		}
	}()
	var s started
	select {
	case s = <-res:
		close(taken)
	case <-ctx.Done():
		close(abandoned)
		return nil, fmt.Errorf("kernel start on the gateway gave up (the caller's context ended, or StartTimeout %v passed): %w", k.opts.StartTimeout, context.Cause(ctx))
	}
	if s.err != nil {
		return nil, fmt.Errorf("kernel failed to start on the gateway: %w", s.err)
	}
	in, err := k.connectRemote(ctx, s.id, true)
	if err != nil {
		return nil, err
	}
	// The server launched the kernel, not launchShim: bound its stream
	// messages here, so that heavy printing leaves in messages of a few
	// MiB rather than in one over the host's limit (which would drop the
	// connection, and with it the kernel's state).
	init := boundStreams() + envCode(k.opts.Env) + k.opts.InitCode
	if _, err := in.execute(ctx, init, &ExecOptions{Silent: true}); err != nil {
		k.kill(in)
		return nil, fmt.Errorf("kernel init code failed: %w", err)
	}
	return in, nil
}

// attachRemote connects to kernel id, running on the gateway with the
// state of an earlier front end, and points it at this one: only Env is
// set in it (the tool server's address and token), since the init code
// ran at its start.
func (k *Kernel) attachRemote(ctx context.Context, id string) (*instance, error) {
	if !gateway.ValidID(id) {
		return nil, fmt.Errorf("kernel: GatewayConfig.KernelID %q is not a kernel id", id)
	}
	if _, err := k.remote.c.Kernel(ctx, id); err != nil {
		var he *gateway.HTTPError
		if errors.As(err, &he) && he.Status == 404 {
			return nil, ErrNoKernel
		}
		return nil, fmt.Errorf("kernel attach on the gateway: %w", err)
	}
	in, err := k.connectRemote(ctx, id, false)
	if err != nil {
		return nil, err
	}
	if code := envCode(k.opts.Env); code != "" {
		if _, err := in.execute(ctx, code, &ExecOptions{Silent: true}); err != nil {
			// Not ours to delete: let it go as it was.
			in.closing.Store(true)
			k.detachInstance(in)
			return nil, fmt.Errorf("kernel attach: setting its environment: %w", err)
		}
	}
	k.opts.Logger.Debug("attached to a gateway kernel", "kernel", id)
	return in, nil
}

// connectRemote makes the instance of gateway kernel id: its watcher, its
// connection, the handshake and the heartbeat. A failure deletes a kernel
// this Kernel started (own), and lets go of one it attached to.
func (k *Kernel) connectRemote(ctx context.Context, id string, own bool) (*instance, error) {
	fail := func(in *instance) {
		if own {
			k.kill(in)
			return
		}
		in.closing.Store(true)
		k.detachInstance(in)
	}
	log := k.opts.Logger
	proc := &remoteProcess{c: k.remote.c, id: id, grace: k.opts.ShutdownGrace, done: make(chan struct{}), log: log.Warn}
	in := newInstance(k, proc)
	k.wg.Add()
	go func() {
		defer k.wg.Done()
		proc.Wait(context.Background()) // lifetime: the gateway kernel, until its bounded DELETE or its release (Detach)
		in.exitCause = "the gateway kernel was deleted"
		close(in.exited)
		in.markDead(in.exitCause)
	}()
	conn, err := k.remote.c.Connect(ctx, id, in.handle, &gateway.ConnOptions{
		Legacy:    k.remote.legacy,
		SessionID: k.session,
		OnLost:    func(cause string) { in.markDead(cause) },
		OnDropped: func(err error) { log.Warn("dropped kernel message", "err", err) },
	})
	if err != nil {
		fail(in)
		return nil, fmt.Errorf("kernel failed to start on the gateway: %w", err)
	}
	in.conn = conn
	log.Debug("gateway kernel connected", "kernel", id, "protocol", conn.Protocol())
	if err := in.handshake(ctx); err != nil {
		fail(in)
		return nil, err
	}
	k.wg.Add()
	go in.heartbeat()
	return in, nil
}

// Detach ends this Kernel's hold on its gateway kernel without deleting
// it: the connection closes, and the kernel runs on, with its state, on
// the server (a later Start with GatewayConfig.KernelID attaches to it).
// A cell running then goes on there, and its output is lost. After
// Detach, the Kernel is closed. A local kernel cannot be detached: Detach
// fails and does nothing.
func (k *Kernel) Detach() error {
	if k.remote == nil {
		return errors.New("kernel: only a gateway kernel can be detached; a local one ends with Close")
	}
	k.mu.Lock()
	if k.closed {
		k.mu.Unlock()
		return ErrClosed
	}
	k.closed = true
	in := k.cur
	k.cur = nil
	k.mu.Unlock()
	k.closeCancel()
	k.startMu.Lock()
	//lint:ignore SA2001 the empty section is the wait for a start in progress, which holds startMu while it adds to wg
	k.startMu.Unlock()
	if in != nil {
		in.closedByClose.Store(true)
		in.closing.Store(true)
		k.detachInstance(in)
	}
	if d := k.closeWait(); !k.wg.Wait(d) {
		return fmt.Errorf("kernel: detach: gave up after %v on a gateway call", d)
	}
	return nil
}

// detachInstance lets go of a gateway kernel: no DELETE, no shutdown.
func (k *Kernel) detachInstance(in *instance) {
	select {
	case <-in.stopHB:
	default:
		close(in.stopHB)
	}
	in.markDead("detached")
	if p, ok := in.proc.(*remoteProcess); ok {
		p.release()
	}
	if in.conn != nil {
		in.conn.Close()
	}
}

// RemoteID returns the gateway's id of the current kernel, or "" for a
// local kernel or none.
func (k *Kernel) RemoteID() string {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.cur == nil {
		return ""
	}
	if p, ok := k.cur.proc.(*remoteProcess); ok {
		return p.id
	}
	return ""
}

func (in *instance) isRemote() bool {
	_, ok := in.proc.(*remoteProcess)
	return ok
}

// transport is a kernel's message connection: ZeroMQ sockets for a local
// kernel (jupyter.Conn), a websocket for a gateway kernel (gateway.Conn).
// It is the seam between the engine and where the kernel runs.
type transport interface {
	// Send sends a message on a channel.
	Send(ch jupyter.Channel, m *jupyter.Message) error
	// Ping checks that the kernel is there (heartbeat; websocket ping).
	Ping(ctx context.Context) error
	// Backlog counts messages received and not yet handed over.
	Backlog(ch jupyter.Channel) int
	// Close ends the connection, bounded, and waits for its readers.
	Close() error
}

var (
	_ transport = (*jupyter.Conn)(nil)
	_ transport = (*gateway.Conn)(nil)
)

package mcpconn

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os/exec"
	"regexp"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/ipybox/ipybox/internal/linelog"
)

// A session is one connection to one server.
type session struct {
	name      string
	gen       uint64 // the registry generation of the config it was made from
	transport Transport
	cs        *mcp.ClientSession

	// ctx lives as long as the session: it carries the SSE stream, and
	// cancelling it ends the calls in flight so that closing is prompt.
	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{} // closed when the connection has ended, for any reason

	stopped   atomic.Bool     // set when Stop, StopAll or Close took it out of use
	pgid      int             // the stdio server's process group, or 0
	stderr    *linelog.Writer // nil for remote servers
	closeOnce sync.Once
}

func (s *session) alive() bool {
	select {
	case <-s.done:
		return false
	default:
		return s.ctx.Err() == nil
	}
}

// close ends the session: calls in flight are cancelled, a stdio server is
// asked to exit (stdin closed, then SIGTERM, then SIGKILL, each after
// grace), and what is left of its process group is ended. It is idempotent.
func (s *session) close(grace time.Duration, log *slog.Logger) {
	s.closeOnce.Do(func() {
		s.cancel()
		if err := s.cs.Close(); err != nil {
			// A server that exits non-zero when its stdin closes is common
			// and harmless: this is information, not a failure.
			log.Debug("mcp server session closed", "server", s.name, "error", err)
		}
		<-s.done // bound: cs.Close ends the connection (a stdio server's stop steps, an HTTP DELETE's 5s)
		killGroup(s.pgid, grace)
		if s.stderr != nil {
			s.stderr.Flush()
		}
		log.Info("mcp server stopped", "server", s.name)
	})
}

// connect opens a session to the named server, within ConnectTimeout.
func (m *Manager) connect(ctx context.Context, name string, re regEntry, e *entry) (*session, error) {
	exp, values, err := m.expand(re.cfg)
	m.secrets.add(values...)
	if err != nil {
		return nil, fmt.Errorf("MCP server %q: %w", name, err)
	}
	kind, fallback, err := exp.resolve()
	if err != nil {
		return nil, fmt.Errorf("MCP server %q: %w", name, err)
	}
	if kind != Stdio {
		if err := checkURL(exp.URL); err != nil {
			return nil, fmt.Errorf("MCP server %q: after ${VAR} substitution: %w", name, err)
		}
	}
	deadline := time.Now().Add(m.opts.ConnectTimeout)
	if fallback && e.sseURL == exp.URL {
		kind = SSE // learnt on an earlier connect
	}
	var oh *oauthHandler
	if kind == StreamableHTTP {
		oh = m.oauthFor(e, name, re.gen, exp)
	}
	start := time.Now()
	s, rejected, err := m.dial(ctx, name, exp, kind, deadline, oh)
	if err != nil && fallback && kind == StreamableHTTP && rejected {
		m.log.Info("mcp server rejected streamable HTTP; trying SSE", "server", name, "error", m.secrets.scrub(err.Error()))
		var err2 error
		s, _, err2 = m.dial(ctx, name, exp, SSE, deadline, nil)
		if err2 != nil {
			return nil, fmt.Errorf("MCP server %q: streamable HTTP failed (%v), and so did the SSE fallback: %w", name, err, err2)
		}
		e.sseURL = exp.URL
		err = nil
	}
	if err != nil {
		return nil, err
	}
	s.gen = re.gen
	m.log.Info("mcp server connected", "server", name, "transport", s.transport, "duration", time.Since(start))
	return s, nil
}

// dial makes one connection attempt over the given transport. rejected
// reports a streamable HTTP POST answered with a 4xx status.
func (m *Manager) dial(ctx context.Context, name string, cfg Config, kind Transport, deadline time.Time, oh *oauthHandler) (_ *session, rejected bool, _ error) {
	// The context given to Connect lives on as the SSE stream's, so it must
	// outlast Connect: the connect timeout, the caller's ctx and Close are
	// applied to it by hand, and only until Connect returns.
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	s := &session{name: name, transport: kind, ctx: sctx, cancel: cancel, done: make(chan struct{})}
	d, err := m.transport(ctx, name, cfg, kind, oh, s)
	if err != nil {
		cancel()
		return nil, false, err
	}

	var timedOut atomic.Bool
	timer := time.AfterFunc(time.Until(deadline), func() { timedOut.Store(true); cancel() })
	// An OAuth sign-in stops the connect timeout while a person signs in
	// (see connectClock); it starts again, whole, afterwards.
	sctx = context.WithValue(sctx, clockKey{}, &connectClock{t: timer, d: m.opts.ConnectTimeout})
	stopCaller := context.AfterFunc(ctx, cancel)
	stopClose := context.AfterFunc(m.ctx, cancel)
	cs, err := m.client.Connect(sctx, d.t, nil)
	// Each stop must run, hence no short-circuit.
	t1, t2, t3 := timer.Stop(), stopCaller(), stopClose()
	if err == nil && !(t1 && t2 && t3) {
		// A stop came too late: the session's context is already cancelled.
		cs.Close()
		err = context.Canceled
	}
	if err != nil {
		cancel()
		if d.cmd != nil && d.cmd.Process != nil {
			killGroup(groupOf(d.cmd.SysProcAttr, d.cmd.Process.Pid), m.opts.StopGrace)
		}
		rejected, err := m.connectError(ctx, name, cfg, kind, d, s, timedOut.Load(), err)
		return nil, rejected, err
	}
	s.cs = cs
	if d.cmd != nil && d.cmd.Process != nil {
		s.pgid = groupOf(d.cmd.SysProcAttr, d.cmd.Process.Pid)
	}
	go func() {
		// The connection ends when the server dies or the session closes;
		// done then tells the next call to reconnect.
		cs.Wait() // lifetime: the server's connection
		close(s.done)
	}()
	return s, false, nil
}

// dialing is one connect's transport, with the parts that explain its
// failure: the HTTP transport (a rejected POST), the stdio one (what the
// program printed) and the program.
type dialing struct {
	t   mcp.Transport
	ht  *headerTransport
	st  *stdioTransport
	cmd *exec.Cmd
}

// transport makes the transport of kind for cfg; a stdio server's command
// is made here too (not started).
func (m *Manager) transport(ctx context.Context, name string, cfg Config, kind Transport, oh *oauthHandler, s *session) (*dialing, error) {
	d := &dialing{}
	switch kind {
	case Stdio:
		s.stderr = stderrLog(m.log, name, m.secrets.scrub)
		cmd, err := m.stdioCommand(ctx, name, cfg, s.stderr)
		if err != nil {
			return nil, err
		}
		d.cmd = cmd
		d.st = &stdioTransport{cmd: cmd, stop: m.opts.StopGrace}
		d.t = d.st
	case StreamableHTTP:
		d.ht = &headerTransport{base: m.httpFor(cfg), headers: cfg.Headers}
		// No standalone SSE stream: the host only lists and calls tools, and
		// answers come on the POSTs' own responses.
		st := &mcp.StreamableClientTransport{Endpoint: cfg.URL, HTTPClient: &http.Client{Transport: d.ht, CheckRedirect: sameOrigin}, DisableStandaloneSSE: true}
		if oh != nil {
			st.OAuthHandler = oh
		}
		d.t = st
	case SSE:
		d.ht = &headerTransport{base: m.httpFor(cfg), headers: cfg.Headers}
		d.t = &mcp.SSEClientTransport{Endpoint: cfg.URL, HTTPClient: &http.Client{Transport: d.ht, CheckRedirect: sameOrigin}}
	default:
		return nil, fmt.Errorf("MCP server %q: unknown transport %q", name, kind)
	}
	return d, nil
}

// connectError turns a failed connect into the error that says why, most
// telling first: the timeout, the caller, Close, a sign-in, output that is
// not JSON-RPC, a missing command; else the SDK's error with the end of
// the server's stderr. rejected reports a POST the server refused (the
// caller then tries SSE).
func (m *Manager) connectError(ctx context.Context, name string, cfg Config, kind Transport, d *dialing, s *session, timedOut bool, err error) (rejected bool, _ error) {
	// What a failed server printed usually says why (a missing API key, a
	// wrong argument).
	var tail string
	if s.stderr != nil {
		s.stderr.Flush()
		if t := s.stderr.Tail(3); t != "" {
			tail = "; its stderr ended with: " + t
		}
	}
	switch {
	case timedOut:
		return false, fmt.Errorf("MCP server %q did not complete initialize within %v (the connect timeout); check that it is an MCP server speaking %s%s: %w",
			name, m.opts.ConnectTimeout, kind, tail, context.DeadlineExceeded)
	case ctx.Err() != nil:
		return false, fmt.Errorf("MCP server %q: connecting: %w", name, ctx.Err())
	case m.ctx.Err() != nil:
		return false, ErrClosed
	}
	var lre *LoginRequiredError
	if errors.As(err, &lre) {
		return false, lre // it names the server and the fix
	}
	if d.st != nil {
		if nj := d.st.notJSONRPC(name, cfg, err); nj != nil {
			return false, nj
		}
	}
	if d.cmd != nil && errors.Is(err, exec.ErrNotFound) {
		return false, fmt.Errorf("MCP server %q: command %q not found; check its \"command\" and PATH: %w", name, cfg.Command, err)
	}
	if d.ht != nil {
		err = scrubAnswer(err)
	}
	return d.ht != nil && d.ht.rejectedPOST(), fmt.Errorf("MCP server %q: connecting over %s%s: %w", name, kind, tail, err)
}

// quotedAnswer finds, in the errors of the HTTP client and the MCP SDK,
// the places that quote what the remote end sent: the first line of an
// answer that is not HTTP (an ssh or redis banner), a status or header
// line that is not HTTP's, a line or an event name of an SSE stream that
// is not MCP's, a content type.
var quotedAnswer = regexp.MustCompile(`(malformed [^"\n]{0,40}|first event is|unsupported content type) "(?:[^"\\]|\\.)*"|(malformed MIME header[^:\n]{0,10}:) [^\n]*`)

// scrubAnswer leaves out of a url server's connect error what the server
// sent. The URL may be a client's (register_mcp_server), and it may name
// a service of the host's loopback or of its network (a cloud metadata
// address) that the client cannot reach itself: ipybox connects from the
// host, so the error must not carry the service's answer back.
func scrubAnswer(err error) error {
	msg := err.Error()
	out := quotedAnswer.ReplaceAllString(msg, "$1$2 (not shown: what the server sent)")
	if out == msg {
		return err
	}
	return &scrubbedError{msg: out, err: err}
}

// scrubbedError is an error with a message of its own, and the original
// for errors.Is and errors.As.
type scrubbedError struct {
	msg string
	err error
}

func (e *scrubbedError) Error() string { return e.msg }
func (e *scrubbedError) Unwrap() error { return e.err }

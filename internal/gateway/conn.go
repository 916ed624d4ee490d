package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"

	"github.com/ipybox/ipybox/internal/jupyter"
)

// ConnOptions configures Connect. The zero value is usable.
type ConnOptions struct {
	// Legacy offers no subprotocol, so the server speaks the legacy JSON
	// frames (for servers that mishandle the offer).
	Legacy bool
	// SessionID is the client session the server files the connection
	// under. Empty means a new one.
	SessionID string
	// OnLost is called once, from the reader, when the kernel is lost
	// while the Conn is open: the websocket closed or failed, the server
	// said the kernel is dead or that it restarted it (its state is gone),
	// or the server no longer knows the kernel (culled). Nil ignores it.
	OnLost func(cause string)
	// OnDropped is called for a message that does not parse; it is
	// dropped.
	OnDropped func(err error)
}

// Conn is one kernel's channels websocket. It has the methods of the
// ZeroMQ connection that the kernel package uses (Send, Ping, Backlog,
// Close).
type Conn struct {
	c      *Client
	id     string
	ws     *websocket.Conn
	v1     bool
	h      jupyter.Handler
	o      ConnOptions
	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}

	mu       sync.Mutex
	closed   bool
	lostOnce sync.Once

	// traffic counts reads of message data, not whole messages: a long
	// message arrives over seconds, and a pong queued behind it cannot be
	// read until it is whole. busy is set while the Handler holds a
	// message. Either proves the websocket alive without a ping, whose
	// pong only the reader can see.
	traffic atomic.Int64
	busy    atomic.Bool
	pinged  int64 // traffic at the last Ping; Ping's alone
}

// writeTimeout bounds one Send: a server that stops reading cannot hold a
// caller for longer.
const writeTimeout = 30 * time.Second

// Connect opens kernel id's channels and starts reading; h receives every
// message, from one goroutine, and may block (the websocket then waits).
func (c *Client) Connect(ctx context.Context, id string, h jupyter.Handler, opts *ConnOptions) (*Conn, error) {
	var o ConnOptions
	if opts != nil {
		o = *opts
	}
	if o.SessionID == "" {
		o.SessionID = jupyter.NewID()
	}
	u := *c.base
	switch u.Scheme {
	case "https":
		u.Scheme = "wss"
	default:
		u.Scheme = "ws"
	}
	u.Path = c.base.Path + "/api/kernels/" + url.PathEscape(id) + "/channels"
	u.RawQuery = url.Values{"session_id": {o.SessionID}}.Encode()
	hdr := http.Header{}
	c.authorize(hdr)
	dopts := &websocket.DialOptions{HTTPClient: c.http, HTTPHeader: hdr}
	if !o.Legacy {
		dopts.Subprotocols = []string{SubprotocolV1}
	}
	ws, resp, err := websocket.Dial(ctx, u.String(), dopts)
	if err != nil {
		if resp != nil && resp.StatusCode >= 300 {
			return nil, &HTTPError{Method: "GET", Path: "/api/kernels/" + id + "/channels", Status: resp.StatusCode}
		}
		return nil, fmt.Errorf("gateway: open the channels of kernel %s: %s", id, c.redact(transportError(err)))
	}
	// A message is at most jupyter.MaxMessage bytes, as from a local
	// kernel; a longer one fails the connection (the kernel is reported
	// lost) before it is read into memory.
	ws.SetReadLimit(jupyter.MaxMessage)
	cctx, cancel := context.WithCancel(context.Background())
	conn := &Conn{
		c: c, id: id, ws: ws, h: h, o: o,
		// Decide by the server's answer: a server offered v1 that did not
		// pick it speaks the legacy frames, and would drop a v1 frame.
		v1:  ws.Subprotocol() == SubprotocolV1,
		ctx: cctx, cancel: cancel, done: make(chan struct{}),
	}
	go conn.read()
	return conn, nil
}

// Protocol names the framing in use: SubprotocolV1 or "legacy".
func (c *Conn) Protocol() string {
	if c.v1 {
		return SubprotocolV1
	}
	return "legacy"
}

func (c *Conn) lost(cause string) {
	c.mu.Lock()
	closed := c.closed
	c.mu.Unlock()
	if closed {
		return
	}
	c.lostOnce.Do(func() {
		if c.o.OnLost != nil {
			c.o.OnLost(cause)
		}
	})
}

func (c *Conn) read() {
	defer close(c.done)
	for {
		typ, b, err := c.readMessage()
		if err != nil {
			c.lost(c.readError(err))
			return
		}
		var ch jupyter.Channel
		var m *jupyter.Message
		switch {
		case c.v1 && typ == websocket.MessageBinary:
			ch, m, err = decodeV1(b)
		case !c.v1 && typ == websocket.MessageText:
			ch, m, err = decodeLegacyText(b)
		case !c.v1 && typ == websocket.MessageBinary:
			ch, m, err = decodeLegacyBinary(b)
		default:
			err = fmt.Errorf("%w: a text frame on a v1 connection", errFrame)
		}
		if err != nil {
			if c.o.OnDropped != nil {
				c.o.OnDropped(err)
			}
			continue
		}
		if ch == jupyter.IOPub && m.Header.MsgType == "status" && m.ParentHeader.MsgID == "" {
			// The server's own word on the kernel: it died, and the
			// server either restarted it (its state is gone) or gave up.
			var s struct {
				State string `json:"execution_state"`
			}
			json.Unmarshal(m.Content, &s)
			switch s.State {
			case "dead":
				c.lost("the gateway reports the kernel dead")
				return
			case "restarting":
				c.lost("the kernel died on the gateway, which restarted it: its state is lost")
				return
			}
		}
		c.busy.Store(true)
		c.h(ch, m)
		c.busy.Store(false)
	}
}

// readMessage reads the next message whole, counting each read of its
// data as traffic.
func (c *Conn) readMessage() (websocket.MessageType, []byte, error) {
	typ, r, err := c.ws.Reader(c.ctx)
	if err != nil {
		return 0, nil, err
	}
	c.traffic.Add(1)
	b, err := io.ReadAll(progressReader{r, &c.traffic})
	return typ, b, err
}

// progressReader counts the reads that return data. It reads at most
// progressChunk bytes at a time: the websocket's reader fills the whole
// buffer it is given, which while a long message arrives may be most of
// the message.
type progressReader struct {
	r io.Reader
	n *atomic.Int64
}

const progressChunk = 16 << 10

func (p progressReader) Read(b []byte) (int, error) {
	n, err := p.r.Read(b[:min(len(b), progressChunk)])
	if n > 0 {
		p.n.Add(1)
	}
	return n, err
}

func (c *Conn) readError(err error) string {
	if errors.Is(err, websocket.ErrMessageTooBig) {
		return fmt.Sprintf("the gateway sent a message over the %d MiB limit; its connection was dropped", jupyter.MaxMessage>>20)
	}
	if st := websocket.CloseStatus(err); st != -1 {
		return fmt.Sprintf("the gateway closed the kernel's websocket (%d)", st)
	}
	return "the connection to the gateway was lost: " + c.c.redact(err.Error())
}

// Send sends m on ch.
func (c *Conn) Send(ch jupyter.Channel, m *jupyter.Message) error {
	var b []byte
	var err error
	typ := websocket.MessageText
	if c.v1 {
		b, err = encodeV1(ch, m)
		typ = websocket.MessageBinary
	} else {
		b, err = encodeLegacy(ch, m)
	}
	if err != nil {
		return fmt.Errorf("gateway: encode %s: %w", m.Header.MsgType, err)
	}
	c.mu.Lock()
	closed := c.closed
	c.mu.Unlock()
	if closed {
		return jupyter.ErrClosed
	}
	ctx, cancel := context.WithTimeout(c.ctx, writeTimeout)
	defer cancel()
	if err := c.ws.Write(ctx, typ, b); err != nil {
		return fmt.Errorf("gateway: send %s on %s: %s", m.Header.MsgType, ch, c.c.redact(err.Error()))
	}
	return nil
}

// Ping checks the websocket with a ping and the kernel with GET
// /api/kernels/{id}: a kernel the server no longer knows (deleted, culled)
// is reported lost.
func (c *Conn) Ping(ctx context.Context) error {
	c.mu.Lock()
	closed := c.closed
	c.mu.Unlock()
	if closed {
		return jupyter.ErrClosed
	}
	// Traffic since the last Ping, even part of a message, proves both
	// the websocket and the kernel alive. Asking then would mislead: a
	// pong is read by the reader, which a slow consumer or a long message
	// may be holding back, and a server busy relaying output answers
	// REST late.
	if n := c.traffic.Load(); n != c.pinged || c.busy.Load() {
		c.pinged = n
		return nil
	}
	if err := c.ws.Ping(ctx); err != nil {
		return fmt.Errorf("gateway: websocket ping: %s", c.c.redact(err.Error()))
	}
	m, err := c.c.Kernel(ctx, c.id)
	if errors.Is(err, ErrNotFound) {
		c.lost("the gateway no longer knows the kernel (deleted or culled)")
		return err
	}
	if err != nil {
		return err
	}
	if m.ExecutionState == "dead" {
		c.lost("the gateway reports the kernel dead")
		return errors.New("gateway: kernel dead")
	}
	return nil
}

// Backlog is 0: the reader hands each message over as soon as it is read.
func (c *Conn) Backlog(jupyter.Channel) int { return 0 }

// Close closes the websocket at once and waits for the reader. It does
// not delete the kernel.
func (c *Conn) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		<-c.done // bound: as the first Close's
		return nil
	}
	c.closed = true
	c.mu.Unlock()
	c.cancel()
	c.ws.CloseNow()
	<-c.done // bound: CloseNow ends the reader's read; the Handler returns once the kernel is marked dead
	return nil
}

// ID returns the kernel id.
func (c *Conn) ID() string { return c.id }

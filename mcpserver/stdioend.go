package mcpserver

import (
	"context"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// answerAll makes a connection answer every request it has read before
// the end of its input: `echo '<initialize>' | ipybox mcp` prints the
// reply. The go-sdk stops writing once a read fails (it cancels the
// requests in flight and refuses their responses), so the end of input is
// held back from it until every request read has its response written, or
// the connection is closed (a signal, Serve's ctx). The requests' own
// bounds (a cell's timeout, the approval timeout) bound that wait.
type answerAll struct{ inner mcp.Transport }

func (t answerAll) Connect(ctx context.Context) (mcp.Connection, error) {
	c, err := t.inner.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return &answerAllConn{Connection: c, pending: map[jsonrpc.ID]bool{},
		answered: make(chan struct{}, 1), closed: make(chan struct{})}, nil
}

type answerAllConn struct {
	mcp.Connection
	mu        sync.Mutex
	pending   map[jsonrpc.ID]bool // requests read and not yet answered
	answered  chan struct{}       // a token after each answer
	closed    chan struct{}
	closeOnce sync.Once
}

func (c *answerAllConn) Read(ctx context.Context) (jsonrpc.Message, error) {
	msg, err := c.Connection.Read(ctx)
	if err == nil {
		// subscriptions/listen is answered only when the reader ends (it
		// parks until then): it is not waited for.
		if req, ok := msg.(*jsonrpc.Request); ok && req.IsCall() && req.Method != "subscriptions/listen" {
			c.mu.Lock()
			c.pending[req.ID] = true
			c.mu.Unlock()
		}
		return msg, nil
	}
	for {
		c.mu.Lock()
		n := len(c.pending)
		c.mu.Unlock()
		if n == 0 {
			return nil, err
		}
		select {
		case <-c.answered:
		case <-c.closed:
			return nil, err
		case <-ctx.Done():
			return nil, err
		}
	}
}

func (c *answerAllConn) Write(ctx context.Context, msg jsonrpc.Message) error {
	werr := c.Connection.Write(ctx, msg)
	if resp, ok := msg.(*jsonrpc.Response); ok {
		c.mu.Lock()
		delete(c.pending, resp.ID)
		c.mu.Unlock()
		select {
		case c.answered <- struct{}{}:
		default:
		}
	}
	return werr
}

func (c *answerAllConn) Close() error {
	c.closeOnce.Do(func() { close(c.closed) })
	return c.Connection.Close()
}

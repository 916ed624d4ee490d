package jupyter

import (
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"sync"
)

// The kernel is hostile, and ZeroMQ trusts its peer: a frame header says
// how long the frame is, and zmq4 allocates that much before it reads a
// byte of it (a header of 2^62 bytes crashed the host), and it reads and
// queues whole messages as fast as the peer sends them. Every connection
// to a kernel therefore reads through a guard, which follows the ZMTP 3
// framing of what it reads and
//   - refuses a frame, or a multipart message, longer than MaxMessage: the
//     connection fails with a FrameError, and the kernel is reported lost
//     with it as the cause;
//   - holds the connection back, before the next message, while the
//     messages read from it and not yet handled pass the channel's budget,
//     so a kernel that sends faster than the host handles waits (the
//     kernel's own queue fills) instead of filling the host's memory.
//     ipybox's local kernels bind IOPub with no high-water mark
//     (boundstreams.py): at ipykernel's default of 1000 messages, a PUB
//     socket drops what a held-back connection cannot take.

// MaxMessage is the longest frame or message accepted from a kernel. A
// stream message is at most a few MiB (the kernel's streams are bounded
// and split); images and other rich output rarely reach tens.
const MaxMessage = 128 << 20

// channelBudget is how many bytes of a channel's messages may be read and
// not yet handled before its connection waits. With MaxMessage, a channel
// holds at most channelBudget+MaxMessage bytes, plus one message that zmq4
// has allocated for and not filled.
const channelBudget = 16 << 20

// A FrameError is a frame or message from the kernel over MaxMessage.
type FrameError struct {
	Size uint64 // bytes the frame or message claims, so far
}

func (e *FrameError) Error() string {
	return fmt.Sprintf("jupyter: the kernel sent a message of %d bytes, over the %d MiB limit; its connection was dropped", e.Size, MaxMessage>>20)
}

// budget counts the bytes of a channel's messages that were read and not
// yet handled.
type budget struct {
	mu     sync.Mutex
	cond   *sync.Cond
	n      int64
	limit  int64
	closed bool
}

func newBudget(limit int64) *budget {
	b := &budget{limit: limit}
	b.cond = sync.NewCond(&b.mu)
	return b
}

// wait blocks while the budget is spent, until release or close.
func (b *budget) wait() {
	b.mu.Lock()
	for b.n >= b.limit && !b.closed {
		b.cond.Wait() // bound: release, as the decoder catches up, or close (Conn.Close)
	}
	b.mu.Unlock()
}

func (b *budget) add(n int64) {
	b.mu.Lock()
	b.n += n
	b.mu.Unlock()
}

func (b *budget) release(n int64) {
	b.mu.Lock()
	b.n = max(b.n-n, 0)
	b.mu.Unlock()
	b.cond.Broadcast()
}

func (b *budget) close() {
	b.mu.Lock()
	b.closed = true
	b.mu.Unlock()
	b.cond.Broadcast()
}

type budgetKey struct{}

// withBudget returns ctx carrying b, for the guards of the connections a
// socket made with ctx dials.
func withBudget(ctx context.Context, b *budget) context.Context {
	return context.WithValue(ctx, budgetKey{}, b)
}

// guard wraps conn, dialled with ctx, in a guard.
func guard(ctx context.Context, conn net.Conn) net.Conn {
	b, _ := ctx.Value(budgetKey{}).(*budget)
	return &guardConn{Conn: conn, budget: b, state: stGreeting, need: greetingLen}
}

// ZMTP 3 framing, as far as the guard follows it.
const (
	greetingLen = 64
	flagMore    = 0x01
	flagLong    = 0x02
	flagCommand = 0x04
)

type guardState uint8

const (
	stGreeting guardState = iota // need: greeting bytes left
	stFlags                      // at a frame's flags byte
	stSize                       // need: size bytes left (1 or 8)
	stBody                       // need: body bytes left
)

type guardConn struct {
	net.Conn
	budget *budget // nil: no budget (the heartbeat)

	err     error
	state   guardState
	need    uint64 // bytes left in the greeting, size field or body
	flags   byte
	size    [8]byte
	sizeLen int
	msg     uint64 // bytes of the current message so far
	inMsg   bool   // a frame with MORE set was read: the message goes on
}

func (g *guardConn) Read(p []byte) (int, error) {
	if g.err != nil {
		return 0, g.err
	}
	if g.budget != nil && g.state == stFlags && !g.inMsg {
		g.budget.wait()
	}
	n, err := g.Conn.Read(p)
	if ferr := g.scan(p[:n]); ferr != nil {
		g.err = ferr
		g.Conn.Close()
		return 0, ferr
	}
	return n, err
}

// scan follows the framing through b.
func (g *guardConn) scan(b []byte) error {
	for len(b) > 0 {
		switch g.state {
		case stGreeting, stBody:
			k := min(uint64(len(b)), g.need)
			b = b[k:]
			g.need -= k
			if g.need == 0 {
				g.state = stFlags
			}
		case stFlags:
			g.flags = b[0]
			b = b[1:]
			g.sizeLen = 1
			if g.flags&flagLong != 0 {
				g.sizeLen = 8
			}
			g.need = uint64(g.sizeLen)
			g.state = stSize
		case stSize:
			g.size[uint64(g.sizeLen)-g.need] = b[0]
			b = b[1:]
			g.need--
			if g.need > 0 {
				continue
			}
			size := uint64(g.size[0])
			if g.sizeLen == 8 {
				size = binary.BigEndian.Uint64(g.size[:])
			}
			if err := g.frame(size); err != nil {
				return err
			}
			g.need = size
			g.state = stBody
			if size == 0 {
				g.state = stFlags
			}
		}
	}
	return nil
}

// frame accounts for a frame header of size bytes.
func (g *guardConn) frame(size uint64) error {
	if g.flags&flagCommand != 0 {
		if size > MaxMessage {
			return &FrameError{Size: size}
		}
		return nil
	}
	if size > MaxMessage || g.msg+size > MaxMessage {
		return &FrameError{Size: g.msg + size}
	}
	g.msg += size
	if g.budget != nil {
		g.budget.add(int64(size))
	}
	g.inMsg = g.flags&flagMore != 0
	if !g.inMsg {
		g.msg = 0
	}
	return nil
}

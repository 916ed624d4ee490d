package jupyter

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"sync"
	"time"

	"github.com/go-zeromq/zmq4"
)

// Channel names one of the kernel's sockets.
type Channel int

// The channels a client uses.
const (
	Shell Channel = iota
	Control
	Stdin
	IOPub
	heartbeat
	numChannels
)

func (c Channel) String() string {
	return [...]string{"shell", "control", "stdin", "iopub", "hb"}[c]
}

// Handler receives every verified message, from one goroutine per channel.
// It must not block: the iopub reader must never back up, because the
// kernel's PUB socket silently drops messages (including status: idle) once
// its high-water mark is reached.
type Handler func(ch Channel, m *Message)

// DialOptions configures Dial. The zero value is usable.
type DialOptions struct {
	// Retry is the pause between two connection attempts while the kernel
	// has not yet bound its sockets. Zero means 5ms.
	Retry time.Duration
	// OnLost is called once, from a reader goroutine, when a socket's
	// connection to the kernel ends while the Conn is open (the kernel
	// died). Nil ignores it.
	OnLost func(ch Channel, err error)
	// OnDropped is called for a message that failed to decode or verify.
	OnDropped func(ch Channel, err error)
}

// Conn holds the client sockets of one kernel.
type Conn struct {
	codec   *Codec
	sockets [numChannels]zmq4.Socket
	queues  [numChannels]*frameQueue // set before the readers start
	budgets [numChannels]*budget     // nil for the heartbeat
	cancel  context.CancelFunc
	hbReply chan []byte
	wg      sync.WaitGroup

	mu     sync.Mutex // serialises sends per socket and Ping
	closed bool
	once   sync.Once
}

var discardLog = log.New(io.Discard, "", 0)

// Dial connects to a kernel. It returns when every socket is connected, or
// when ctx ends (the caller cancels ctx when the kernel process exits, so a
// kernel that dies while starting does not leave Dial retrying).
func Dial(ctx context.Context, info *ConnectionInfo, h Handler, opts *DialOptions) (*Conn, error) {
	var o DialOptions
	if opts != nil {
		o = *opts
	}
	if o.Retry <= 0 {
		o.Retry = 5 * time.Millisecond
	}
	sctx, cancel := context.WithCancel(context.Background())
	c := &Conn{
		codec:   NewCodec([]byte(info.Key)),
		cancel:  cancel,
		hbReply: make(chan []byte, 1),
	}
	// The stdin socket must share the shell socket's identity: the kernel
	// routes input_request to the identity that sent the execute_request.
	id := zmq4.SocketIdentity(NewID())
	common := []zmq4.Option{
		zmq4.WithLogger(discardLog),
		zmq4.WithDialerRetry(o.Retry),
		zmq4.WithDialerMaxRetries(-1), // bounded by ctx below, not by a count
		zmq4.WithTimeout(10 * time.Second),
	}
	// Each channel's connection reads through a guard with its own
	// budget (guard.go); the heartbeat's has a size limit only.
	bctx := func(ch Channel) context.Context {
		c.budgets[ch] = newBudget(channelBudget)
		return withBudget(sctx, c.budgets[ch])
	}
	c.sockets[Shell] = zmq4.NewDealer(bctx(Shell), append(common, zmq4.WithID(id))...)
	c.sockets[Stdin] = zmq4.NewDealer(bctx(Stdin), append(common, zmq4.WithID(id))...)
	c.sockets[Control] = zmq4.NewDealer(bctx(Control), common...)
	c.sockets[IOPub] = zmq4.NewSub(bctx(IOPub), common...)
	c.sockets[heartbeat] = zmq4.NewDealer(sctx, common...)
	if err := c.sockets[IOPub].SetOption(zmq4.OptionSubscribe, ""); err != nil {
		c.closeSockets()
		return nil, fmt.Errorf("jupyter: subscribe iopub: %w", err)
	}
	ports := [numChannels]int{info.ShellPort, info.ControlPort, info.StdinPort, info.IOPubPort, info.HBPort}

	// Dial is synchronous and retries until the kernel binds. Dial all five
	// at once; a cancelled ctx stops the retries by closing the sockets.
	stop := context.AfterFunc(ctx, cancel)
	defer stop()
	errs := make(chan error, numChannels)
	for ch := Channel(0); ch < numChannels; ch++ {
		go func() {
			if err := c.sockets[ch].Dial(info.dialEndpoint(ports[ch])); err != nil {
				errs <- fmt.Errorf("jupyter: connect %s: %w", ch, err) // bound: errs has room for every channel
				return
			}
			errs <- nil // bound: errs has room for every channel
		}()
	}
	var first error
	for range numChannels {
		if err := <-errs; err != nil && first == nil { // bound: each Dial ends with ctx, which closes the sockets
			first = err
		}
	}
	if first == nil && ctx.Err() != nil {
		first = ctx.Err()
	}
	if first != nil {
		c.closeSockets()
		if ctx.Err() != nil {
			return nil, fmt.Errorf("jupyter: connect to kernel: %w", context.Cause(ctx))
		}
		return nil, first
	}

	for ch := Channel(0); ch < numChannels; ch++ {
		c.wg.Add(1)
		c.queues[ch] = &frameQueue{notify: make(chan struct{}, 1)}
		go c.read(ch, h, &o)
	}
	return c, nil
}

func (c *Conn) read(ch Channel, h Handler, o *DialOptions) {
	defer c.wg.Done()
	sock := c.sockets[ch]
	// The reader only receives: verifying and decoding happen on another
	// goroutine, so that the socket is drained as fast as the kernel
	// writes, up to the channel's budget (guard.go). Otherwise, on a busy
	// machine, the kernel's PUB socket reaches its high-water mark and
	// drops output without a word.
	q := c.queues[ch]
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			batch, open := q.take()
			for _, frames := range batch {
				m, err := c.codec.Decode(frames)
				if err != nil {
					if o.OnDropped != nil {
						o.OnDropped(ch, err)
					}
				} else {
					h(ch, m)
				}
				q.done()
				if b := c.budgets[ch]; b != nil {
					b.release(framesLen(frames))
				}
			}
			if !open {
				return
			}
		}
	}()
	defer func() {
		q.close()
		<-done // bound: the decoder ends once q is closed and the Handler returned
	}()
	for {
		msg, err := sock.Recv()
		if err != nil {
			q.close()
			<-done // bound: as above; what was received is delivered before the loss is told
			c.mu.Lock()
			closed := c.closed
			c.mu.Unlock()
			if !closed && o.OnLost != nil {
				o.OnLost(ch, err)
			}
			return
		}
		if ch == heartbeat {
			select {
			case c.hbReply <- msg.Bytes():
			default: // a late reply to an earlier ping
			}
			continue
		}
		q.push(msg.Frames)
	}
}

// framesLen is the size of a message's frames, as its guard counted them.
func framesLen(frames [][]byte) int64 {
	n := 0
	for _, f := range frames {
		n += len(f)
	}
	return int64(n)
}

// frameQueue is a queue of received messages, from the reader
// to the decoder; the channel's budget bounds its bytes.
type frameQueue struct {
	mu      sync.Mutex
	items   [][][]byte
	pending int // received, not yet handed to the Handler
	closed  bool
	notify  chan struct{}
}

func (q *frameQueue) push(f [][]byte) {
	q.mu.Lock()
	q.items = append(q.items, f)
	q.pending++
	q.mu.Unlock()
	select {
	case q.notify <- struct{}{}:
	default:
	}
}

func (q *frameQueue) close() {
	q.mu.Lock()
	q.closed = true
	q.mu.Unlock()
	select {
	case q.notify <- struct{}{}:
	default:
	}
}

func (q *frameQueue) done() {
	q.mu.Lock()
	q.pending--
	q.mu.Unlock()
}

func (q *frameQueue) backlog() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.pending
}

// Backlog returns how many messages of ch were received but not yet handed
// to the Handler (being verified and decoded): while it is not zero, more
// of the kernel's output is on its way, whatever the clock says.
func (c *Conn) Backlog(ch Channel) int {
	if q := c.queues[ch]; q != nil {
		return q.backlog()
	}
	return 0
}

// take waits for messages and returns them all, and whether more may come.
func (q *frameQueue) take() ([][][]byte, bool) {
	for {
		q.mu.Lock()
		items, closed := q.items, q.closed
		q.items = nil
		q.mu.Unlock()
		if len(items) > 0 || closed {
			return items, !closed
		}
		<-q.notify // lifetime: the connection; close notifies
	}
}

// ErrClosed is returned by operations on a closed Conn.
var ErrClosed = errors.New("jupyter: connection closed")

// Send signs m and sends it on ch. A Send to a kernel that has died is
// dropped silently by ZeroMQ; callers detect death separately.
func (c *Conn) Send(ch Channel, m *Message) error {
	frames, err := c.codec.Encode(m)
	if err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return ErrClosed
	}
	if err := c.sockets[ch].SendMulti(zmq4.NewMsgFrom(frames...)); err != nil {
		return fmt.Errorf("jupyter: send %s on %s: %w", m.Header.MsgType, ch, err)
	}
	return nil
}

// Ping sends one heartbeat and waits for the echo until ctx ends.
func (c *Conn) Ping(ctx context.Context) error {
	payload := []byte(NewID())
	select { // drop a stale reply
	case <-c.hbReply:
	default:
	}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return ErrClosed
	}
	err := c.sockets[heartbeat].Send(zmq4.NewMsg(payload))
	c.mu.Unlock()
	if err != nil {
		return fmt.Errorf("jupyter: heartbeat: %w", err)
	}
	for {
		select {
		case b := <-c.hbReply:
			if string(b) == string(payload) {
				return nil
			}
		case <-ctx.Done():
			return fmt.Errorf("jupyter: heartbeat: %w", ctx.Err())
		}
	}
}

// Close closes every socket and waits for the reader goroutines. It is
// idempotent and does not block on the kernel.
func (c *Conn) Close() error {
	c.once.Do(func() {
		c.mu.Lock()
		c.closed = true
		c.mu.Unlock()
		c.closeSockets()
		c.wg.Wait() // bound: the readers end once their sockets are closed and their decoders done
	})
	return nil
}

func (c *Conn) closeSockets() {
	c.cancel()
	for _, b := range c.budgets {
		if b != nil {
			b.close()
		}
	}
	for _, s := range c.sockets {
		if s != nil {
			s.Close()
		}
	}
}

package gateway_test

import (
	"bufio"
	"context"
	"crypto/sha1"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/coder/websocket"

	"github.com/ipybox/ipybox/internal/gateway"
	"github.com/ipybox/ipybox/internal/jupyter"
	"github.com/ipybox/ipybox/internal/testenv"
)

// The gateway is not trusted with the host: each test here is a hostile
// server, and the client must neither crash, nor allocate past its
// bounds, nor hang, nor leak the token.

const secret = "tok-7f3c9e1d-secret"

// wsServer serves the channels websocket with serve, and answers REST with
// rest (nil: 404).
func wsServer(t *testing.T, protos []string, serve func(ctx context.Context, ws *websocket.Conn)) *httptest.Server {
	t.Helper()
	return wsServerOn(t, nil, protos, serve)
}

// wsServerOn is wsServer on the in-memory network n (nil: a loopback port).
func wsServerOn(t *testing.T, n *testenv.Network, protos []string, serve func(ctx context.Context, ws *websocket.Conn)) *httptest.Server {
	t.Helper()
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.HasSuffix(r.URL.Path, "/channels") {
			http.NotFound(w, r)
			return
		}
		ws, err := websocket.Accept(w, r, &websocket.AcceptOptions{Subprotocols: protos})
		if err != nil {
			return
		}
		defer ws.CloseNow()
		serve(r.Context(), ws)
	})
	if n != nil {
		return n.Server(t, h)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}

// waitGone returns when the client has closed the websocket.
func waitGone(ctx context.Context, ws *websocket.Conn) {
	for {
		if _, _, err := ws.Read(ctx); err != nil {
			return
		}
	}
}

type recorder struct {
	mu      sync.Mutex
	msgs    []*jupyter.Message
	dropped []error
	lost    chan string
}

func newRecorder() *recorder { return &recorder{lost: make(chan string, 1)} }

func (r *recorder) opts(legacy bool) *gateway.ConnOptions {
	return &gateway.ConnOptions{
		Legacy: legacy,
		OnLost: func(c string) { r.lost <- c },
		OnDropped: func(err error) {
			r.mu.Lock()
			r.dropped = append(r.dropped, err)
			r.mu.Unlock()
		},
	}
}

func (r *recorder) handle(_ jupyter.Channel, m *jupyter.Message) {
	r.mu.Lock()
	r.msgs = append(r.msgs, m)
	r.mu.Unlock()
}

func connect(t *testing.T, url string, r *recorder, legacy bool) *gateway.Conn {
	t.Helper()
	return connectOn(t, nil, url, r, legacy)
}

// connectOn is connect over the in-memory network n (nil: the real one).
func connectOn(t *testing.T, n *testenv.Network, url string, r *recorder, legacy bool) *gateway.Conn {
	t.Helper()
	cfg := gateway.Config{URL: url, Token: secret}
	if n != nil {
		cfg.HTTPClient = n.Client()
	}
	c, err := gateway.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := c.Connect(ctx, "k1", r.handle, r.opts(legacy))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

func validLegacy(t *testing.T) []byte {
	m, _ := jupyter.NewMessage("s", "stream", map[string]string{"name": "stdout", "text": "ok"})
	b, err := gateway.EncodeLegacy(jupyter.IOPub, m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestHostileMalformed: frames that do not parse are dropped, one by one;
// the connection goes on and a good message after them arrives.
func TestHostileMalformed(t *testing.T) {
	testenv.CheckGoroutines(t)
	v1Bad := func(n uint64, offs ...uint64) []byte {
		b := binary.LittleEndian.AppendUint64(nil, n)
		for _, o := range offs {
			b = binary.LittleEndian.AppendUint64(b, o)
		}
		return append(b, "iopub{}{}{}{}"...)
	}
	cases := []struct {
		name  string
		proto []string
		typ   websocket.MessageType
		frame []byte
	}{
		{"legacy: not JSON", nil, websocket.MessageText, []byte("{not json")},
		{"legacy: unknown channel", nil, websocket.MessageText, []byte(`{"channel":"hb","header":{},"parent_header":{},"metadata":{},"content":{}}`)},
		{"legacy: header not an object", nil, websocket.MessageText, []byte(`{"channel":"iopub","header":[1],"parent_header":{},"metadata":{},"content":{}}`)},
		{"legacy: content not JSON", nil, websocket.MessageText, []byte(`{"channel":"iopub","header":{},"parent_header":{},"metadata":{},"content":"x"`)},
		{"legacy binary: part count past the frame", nil, websocket.MessageBinary, []byte{0xff, 0xff, 0xff, 0xff, 0, 0, 0, 8}},
		{"legacy binary: offset past the frame", nil, websocket.MessageBinary, []byte{0, 0, 0, 1, 0xff, 0xff, 0xff, 0xf0}},
		{"v1: offset count 2^63", []string{gateway.SubprotocolV1}, websocket.MessageBinary, v1Bad(1 << 63)},
		{"v1: offsets out of bounds", []string{gateway.SubprotocolV1}, websocket.MessageBinary, v1Bad(6, 56, 61, 1<<40, 1<<41, 1<<42, 1<<43)},
		{"v1: offsets backwards", []string{gateway.SubprotocolV1}, websocket.MessageBinary, v1Bad(6, 56, 61, 58, 60, 62, 64)},
		{"v1: text frame", []string{gateway.SubprotocolV1}, websocket.MessageText, []byte("{}")},
		{"v1: short", []string{gateway.SubprotocolV1}, websocket.MessageBinary, []byte{1, 2}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			srv := wsServer(t, tc.proto, func(ctx context.Context, ws *websocket.Conn) {
				ws.Write(ctx, tc.typ, tc.frame)
				m, _ := jupyter.NewMessage("s", "stream", map[string]string{"name": "stdout", "text": "ok"})
				var good []byte
				typ := websocket.MessageText
				if ws.Subprotocol() == gateway.SubprotocolV1 {
					good, _ = gateway.EncodeV1(jupyter.IOPub, m)
					typ = websocket.MessageBinary
				} else {
					good = validLegacy(t)
				}
				ws.Write(ctx, typ, good)
				waitGone(ctx, ws)
			})
			r := newRecorder()
			conn := connect(t, srv.URL, r, false)
			for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
				r.mu.Lock()
				n, d := len(r.msgs), len(r.dropped)
				r.mu.Unlock()
				if n == 1 && d == 1 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("got %d messages and %d dropped, want 1 and 1", n, d)
				}
			}
			r.mu.Lock()
			t.Logf("dropped: %v", r.dropped[0])
			r.mu.Unlock()
			conn.Close()
		})
	}
}

// TestHostileHugeMessage: a message over jupyter.MaxMessage fails the
// connection (reported lost, with the limit) instead of being held; a
// frame header that claims 2^63 bytes allocates nothing.
func TestHostileHugeMessage(t *testing.T) {
	testenv.CheckGoroutines(t)
	srv := wsServer(t, nil, func(ctx context.Context, ws *websocket.Conn) {
		w, err := ws.Writer(ctx, websocket.MessageText)
		if err != nil {
			return
		}
		chunk := make([]byte, 1<<20)
		for i := 0; i < jupyter.MaxMessage>>20+2; i++ {
			if _, err := w.Write(chunk); err != nil {
				return
			}
		}
		w.Close()
		waitGone(ctx, ws)
	})
	r := newRecorder()
	conn := connect(t, srv.URL, r, true)
	select {
	case cause := <-r.lost:
		if !strings.Contains(cause, "limit") {
			t.Errorf("cause = %q", cause)
		}
		t.Logf("lost: %s", cause)
	case <-time.After(60 * time.Second):
		t.Fatal("the oversized message was not refused")
	}
	conn.Close()
}

// TestHostileFrameHeader: a raw frame header that claims 2^63-1 bytes and
// then stalls neither allocates nor blocks Close.
func TestHostileFrameHeader(t *testing.T) {
	testenv.CheckGoroutines(t)
	synctest.Test(t, testHostileFrameHeader)
}

func testHostileFrameHeader(t *testing.T) {
	n := testenv.NewNetwork()
	// A plain HTTP server that answers the upgrade by hand.
	raw := n.Server(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hj, _ := w.(http.Hijacker)
		c, brw, err := hj.Hijack()
		if err != nil {
			return
		}
		defer c.Close()
		key := r.Header.Get("Sec-WebSocket-Key")
		fmt.Fprintf(brw, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: %s\r\n\r\n", acceptKey(key))
		hdr := []byte{0x82, 127}
		hdr = binary.BigEndian.AppendUint64(hdr, 1<<63-1)
		brw.Write(hdr)
		brw.Write(make([]byte, 1024))
		brw.Flush()
		bufio.NewReader(c).ReadByte() // stall until the client goes
	}))
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	r := newRecorder()
	conn := connectOn(t, n, raw.URL, r, true)
	synctest.Wait() // the host has read all the server sent
	runtime.ReadMemStats(&after)
	if grew := int64(after.HeapAlloc) - int64(before.HeapAlloc); grew > 64<<20 {
		t.Errorf("the heap grew by %d MiB on a frame header alone", grew>>20)
	}
	select {
	case cause := <-r.lost:
		t.Logf("lost: %s", cause)
	default:
		t.Logf("not lost: the reader waits for the rest of the frame")
	}
	begin := time.Now()
	conn.Close()
	if d := time.Since(begin); d > 2*time.Second {
		t.Errorf("Close took %v", d)
	}
}

// TestHostileBackpressure: a gateway that streams without end while the
// host's consumer is slow waits for it: what the host holds stays bounded.
func TestHostileBackpressure(t *testing.T) {
	testenv.CheckGoroutines(t)
	synctest.Test(t, testHostileBackpressure)
}

func testHostileBackpressure(t *testing.T) {
	n := testenv.NewNetwork()
	var sent atomic.Int64
	srv := wsServerOn(t, n, nil, func(ctx context.Context, ws *websocket.Conn) {
		msg := validLegacy(t)
		pad := strings.Repeat("x", 64<<10)
		msg = []byte(strings.Replace(string(msg), `"ok"`, `"`+pad+`"`, 1))
		// Past the bound it stops by itself: a host that does not hold it
		// back fails the test rather than spinning the bubble forever.
		for ctx.Err() == nil && sent.Load() <= 128<<20 {
			wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			err := ws.Write(wctx, websocket.MessageText, msg)
			cancel()
			if err != nil {
				return
			}
			sent.Add(int64(len(msg)))
		}
	})
	c, _ := gateway.New(gateway.Config{URL: srv.URL, HTTPClient: n.Client()})
	block := make(chan struct{})
	var got atomic.Int64
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := c.Connect(ctx, "k1", func(jupyter.Channel, *jupyter.Message) {
		if got.Add(1) > 3 {
			<-block // the consumer stops
		}
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	// Every goroutine of the bubble blocked: the consumer on its fourth
	// message, the host's reader behind it, the server on a write.
	synctest.Wait()
	s1 := sent.Load()
	time.Sleep(time.Second) // on the bubble's clock
	synctest.Wait()
	s2 := sent.Load()
	t.Logf("the server sent %d KiB, then %d KiB more", s1>>10, (s2-s1)>>10)
	if s2 > 64<<20 || s2 != s1 {
		t.Errorf("the server went on sending (%d then %d bytes): the host is not holding it back", s1, s2)
	}
	close(block)
	conn.Close()
}

// TestHostileREST: REST answers that are huge, not JSON, or carry a
// kernel id that is a path are errors; the token never shows in one.
func TestHostileREST(t *testing.T) {
	cases := []struct {
		name, want string
		status     int
		body       string
	}{
		{"huge body", "over 1048576 bytes", 201, `{"id":"` + strings.Repeat("a", 2<<20) + `"}`},
		{"not JSON", "not the JSON of the kernels API", 201, "<html>proxy login</html>"},
		{"id is a path", "not a kernel id", 201, `{"id":"../../api/contents"}`},
		{"echoes the token", "[token]", 500, ""},
		{"wrong token", "refused the token", 403, `{"message":"Forbidden"}`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(tc.status)
				body := tc.body
				if body == "" {
					body = "bad auth header: " + r.Header.Get("Authorization")
				}
				w.Write([]byte(body))
			}))
			defer srv.Close()
			c, err := gateway.New(gateway.Config{URL: srv.URL, Token: secret})
			if err != nil {
				t.Fatal(err)
			}
			_, err = c.StartKernel(context.Background(), nil)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
			if strings.Contains(err.Error(), secret) {
				t.Errorf("the error holds the token: %v", err)
			}
			if len(err.Error()) > 1000 {
				t.Errorf("the error is %d bytes long", len(err.Error()))
			}
		})
	}
}

// TestTLSUsesSystemRoots: an https gateway with a certificate no system
// root signed is refused.
func TestTLSUsesSystemRoots(t *testing.T) {
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(201)
		json.NewEncoder(w).Encode(map[string]string{"id": "k1"})
	}))
	defer srv.Close()
	c, err := gateway.New(gateway.Config{URL: srv.URL, Token: secret})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.StartKernel(context.Background(), nil)
	if err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("err = %v, want a certificate error", err)
	}
	if _, err := c.Connect(context.Background(), "k1", func(jupyter.Channel, *jupyter.Message) {}, nil); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("websocket: err = %v, want a certificate error", err)
	}
}

// TestConfigErrors: a bad URL gives an error that names it and the fix,
// and never the credential it carried.
func TestConfigErrors(t *testing.T) {
	cases := []struct{ url, want string }{
		{"", "--gateway-url"},
		{"ftp://host", "use http:// or https://"},
		{"http://", "no host"},
		{"http://user:" + secret + "@host", "carries a credential"},
		{"http://host/?token=" + secret, "carries a credential"},
	}
	for _, tc := range cases {
		_, err := gateway.New(gateway.Config{URL: tc.url})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: err = %v, want %q", tc.url, err, tc.want)
			continue
		}
		if strings.Contains(err.Error(), secret) {
			t.Errorf("%q: the error holds the credential: %v", tc.url, err)
		}
	}
	if _, err := gateway.New(gateway.Config{URL: "http://h", Token: "a\nb"}); err == nil {
		t.Error("a token with a line break was accepted")
	}
}

func acceptKey(key string) string {
	h := sha1.Sum([]byte(key + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"))
	return base64.StdEncoding.EncodeToString(h[:])
}

// TestSlowMessageIsLiveness: a message that takes longer to arrive than a
// heartbeat (heavy output from the kernel, a slow link) proves the
// connection alive while it arrives. The pong of a ping would queue behind
// it: the server here, like Jupyter Server, sends the message as one frame
// and answers no ping before the frame is out.
func TestSlowMessageIsLiveness(t *testing.T) {
	testenv.CheckGoroutines(t)
	synctest.Test(t, testSlowMessageIsLiveness)
}

// testSlowMessageIsLiveness runs on the bubble's clock: the 3 s the message
// takes, and the pings' waits, pass at once and in a fixed order.
func testSlowMessageIsLiveness(t *testing.T) {
	n := testenv.NewNetwork()
	head, tail, _ := strings.Cut(string(validLegacy(t)), `"ok"`)
	const chunks, chunk = 30, 32 << 10 // 3 s
	raw := n.Server(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.HasSuffix(r.URL.Path, "/channels") {
			w.Write([]byte(`{"id":"k1","name":"python3","execution_state":"busy"}`))
			return
		}
		hj, _ := w.(http.Hijacker)
		c, brw, err := hj.Hijack()
		if err != nil {
			return
		}
		defer c.Close()
		fmt.Fprintf(brw, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: %s\r\n\r\n", acceptKey(r.Header.Get("Sec-WebSocket-Key")))
		frame := func(payload []byte) []byte {
			hdr := []byte{0x81, 127}
			return append(binary.BigEndian.AppendUint64(hdr, uint64(len(payload))), payload...)
		}
		brw.Write(frame(validLegacy(t)))
		brw.Flush()
		body := []byte(head + `"` + strings.Repeat("x", chunks*chunk) + `"` + tail)
		out := frame(body)
		for i := 0; len(out) > 0; i++ {
			if i > 0 {
				time.Sleep(100 * time.Millisecond) // a slow link
			}
			n := min(len(out), chunk)
			if _, err := c.Write(out[:n]); err != nil {
				return
			}
			out = out[n:]
		}
		bufio.NewReader(c).ReadByte() // stall until the client goes
	}))
	r := newRecorder()
	conn := connectOn(t, n, raw.URL, r, true)
	count := func() int {
		r.mu.Lock()
		defer r.mu.Unlock()
		return len(r.msgs)
	}
	for deadline := time.Now().Add(5 * time.Second); count() == 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the first message did not arrive")
		}
	}
	for i := 0; count() < 2; i++ {
		time.Sleep(300 * time.Millisecond)
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		err := conn.Ping(ctx)
		cancel()
		if err != nil && count() < 2 {
			t.Fatalf("ping %d while a long message arrives: %v", i, err)
		}
		if i > 50 {
			t.Fatal("the long message did not arrive")
		}
	}
}

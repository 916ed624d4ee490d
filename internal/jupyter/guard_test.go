package jupyter

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"testing"
	"testing/synctest"
	"time"
)

// zmtpFrame encodes one ZMTP 3 frame header and body.
func zmtpFrame(flags byte, body []byte) []byte {
	var b []byte
	if len(body) > 255 {
		b = append(b, flags|flagLong)
		b = binary.BigEndian.AppendUint64(b, uint64(len(body)))
	} else {
		b = append(b, flags, byte(len(body)))
	}
	return append(b, body...)
}

// longHeader is the header of a long frame that claims size bytes.
func longHeader(flags byte, size uint64) []byte {
	return binary.BigEndian.AppendUint64([]byte{flags | flagLong}, size)
}

// chunkConn is a net.Conn whose reads return data chunk bytes at a time.
type chunkConn struct {
	net.Conn
	r     *bytes.Reader
	chunk int
}

func (c *chunkConn) Read(p []byte) (int, error) {
	return c.r.Read(p[:min(len(p), c.chunk)])
}
func (c *chunkConn) Close() error { return nil }

func TestGuardFraming(t *testing.T) {
	greeting := bytes.Repeat([]byte{0x7f}, greetingLen)
	ok := append(append(append([]byte{}, greeting...),
		zmtpFrame(flagCommand, []byte("\x05READY"))...),
		append(zmtpFrame(flagMore, []byte("ident")), zmtpFrame(0, bytes.Repeat([]byte("x"), 1000))...)...)
	tests := []struct {
		name    string
		stream  []byte
		wantErr bool
	}{
		{"messages", ok, false},
		{"a frame of 2^62 bytes", append(append([]byte{}, greeting...), longHeader(0, 1<<62)...), true},
		{"a frame just over the limit", append(append([]byte{}, greeting...), longHeader(0, MaxMessage+1)...), true},
		{"a frame at the limit", append(append([]byte{}, greeting...), longHeader(0, MaxMessage)...), false},
		{"a command over the limit", append(append([]byte{}, greeting...), longHeader(flagCommand, MaxMessage+1)...), true},
		{"frames of a message over the limit together", append(append(append([]byte{}, greeting...),
			zmtpFrame(flagMore, make([]byte, 300))...), longHeader(0, MaxMessage-299)...), true},
		{"two messages at the limit each", append(append(append([]byte{}, greeting...),
			zmtpFrame(0, make([]byte, 300))...), longHeader(0, MaxMessage)...), false},
	}
	for _, tc := range tests {
		for _, chunk := range []int{1, 2, 7, 4096} {
			g := guard(t.Context(), &chunkConn{r: bytes.NewReader(tc.stream), chunk: chunk})
			_, err := io.Copy(io.Discard, g)
			var fe *FrameError
			if got := errors.As(err, &fe); got != tc.wantErr {
				t.Errorf("%s, read %d bytes at a time: error %v, want a FrameError: %v", tc.name, chunk, err, tc.wantErr)
			}
		}
	}
}

// TestGuardBudget: past the budget, a read at a message boundary waits
// until messages are released; close lets it go.
func TestGuardBudget(t *testing.T) {
	synctest.Test(t, testGuardBudget)
}

func testGuardBudget(t *testing.T) {
	b := newBudget(1000)
	first := append(bytes.Repeat([]byte{0x7f}, greetingLen), zmtpFrame(0, make([]byte, 1000))...)
	stream := append(append([]byte{}, first...), zmtpFrame(0, []byte("next"))...)
	g := guard(withBudget(t.Context(), b), &chunkConn{r: bytes.NewReader(stream), chunk: 1 << 20})
	buf := make([]byte, len(first))
	if _, err := io.ReadFull(g, buf); err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		_, err := g.Read(make([]byte, 16))
		got <- err
	}()
	synctest.Wait() // the read is as far as it gets
	select {
	case err := <-got:
		t.Fatalf("read past the budget returned (%v); want it to wait", err)
	default:
	}
	b.release(1000)
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("release did not let the read go on")
	}
	// Spent again: close ends the wait.
	b.add(5000)
	go func() {
		_, err := g.Read(make([]byte, 16))
		got <- err
	}()
	b.close()
	select {
	case <-got:
	case <-time.After(5 * time.Second):
		t.Fatal("close did not end the wait")
	}
}

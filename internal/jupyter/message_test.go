package jupyter

import (
	"bytes"
	"encoding/json"
	"errors"
	"testing"
)

func TestCodecRoundTrip(t *testing.T) {
	c := NewCodec([]byte("key"))
	m, err := NewMessage("sess", "execute_request", map[string]any{"code": "1+1"})
	if err != nil {
		t.Fatal(err)
	}
	m.Identities = [][]byte{[]byte("id1")}
	m.ParentHeader = Header{MsgID: "p1", MsgType: "x"}
	m.Buffers = [][]byte{[]byte("buf")}
	frames, err := c.Encode(m)
	if err != nil {
		t.Fatal(err)
	}
	got, err := c.Decode(frames)
	if err != nil {
		t.Fatal(err)
	}
	if got.Header != m.Header || got.ParentHeader.MsgID != "p1" || string(got.Identities[0]) != "id1" || string(got.Buffers[0]) != "buf" {
		t.Errorf("round trip: %+v", got)
	}
	var content map[string]any
	json.Unmarshal(got.Content, &content)
	if content["code"] != "1+1" {
		t.Errorf("content = %s", got.Content)
	}
}

func TestCodecRejects(t *testing.T) {
	c := NewCodec([]byte("key"))
	m, _ := NewMessage("s", "status", map[string]string{"execution_state": "idle"})
	good, _ := c.Encode(m)
	tamper := func(i int, b []byte) [][]byte {
		f := make([][]byte, len(good))
		copy(f, good)
		f[i] = b
		return f
	}
	for _, tc := range []struct {
		name   string
		frames [][]byte
		err    error
	}{
		{"tampered content", tamper(5, []byte(`{"execution_state":"busy"}`)), ErrBadSignature},
		{"tampered header", tamper(2, bytes.Replace(good[2], []byte("status"), []byte("stream"), 1)), ErrBadSignature},
		{"wrong signature", tamper(1, bytes.Repeat([]byte("0"), 64)), ErrBadSignature},
		{"empty signature", tamper(1, nil), ErrBadSignature},
		{"no delimiter", good[1:], nil},
		{"too few frames", good[:4], nil},
	} {
		_, err := c.Decode(tc.frames)
		if err == nil {
			t.Errorf("%s: accepted", tc.name)
		} else if tc.err != nil && !errors.Is(err, tc.err) {
			t.Errorf("%s: err = %v, want %v", tc.name, err, tc.err)
		}
	}
	// Another key's message is refused.
	if _, err := NewCodec([]byte("other")).Decode(good); !errors.Is(err, ErrBadSignature) {
		t.Errorf("other key: %v", err)
	}
}

func TestConnectionPathTooLong(t *testing.T) {
	if _, err := NewIPCConnection("/" + string(bytes.Repeat([]byte("d"), 110))); err == nil {
		t.Error("a run directory too long for unix sockets was accepted")
	}
	c, err := NewIPCConnection("/tmp/x")
	if err != nil || c.Endpoint(c.ShellPort) != "ipc:///tmp/x/k-1" || len(c.Key) != 64 {
		t.Errorf("connection info %+v, %v", c, err)
	}
}

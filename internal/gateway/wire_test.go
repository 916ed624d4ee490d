package gateway

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/ipybox/ipybox/internal/jupyter"
)

// TestWireRoundTrip: what encodeV1 and encodeLegacy write, the decoders
// read back, channel and all.
func TestWireRoundTrip(t *testing.T) {
	m, err := jupyter.NewMessage("sess", "execute_request", map[string]any{"code": "print('é')"})
	if err != nil {
		t.Fatal(err)
	}
	m.ParentHeader = jupyter.Header{MsgID: "p1", MsgType: "x"}
	m.Metadata = json.RawMessage(`{"a":1}`)
	for _, ch := range []jupyter.Channel{jupyter.Shell, jupyter.Control, jupyter.Stdin, jupyter.IOPub} {
		v1, err := encodeV1(ch, m)
		if err != nil {
			t.Fatal(err)
		}
		leg, err := encodeLegacy(ch, m)
		if err != nil {
			t.Fatal(err)
		}
		for name, dec := range map[string]func() (jupyter.Channel, *jupyter.Message, error){
			"v1":     func() (jupyter.Channel, *jupyter.Message, error) { return decodeV1(v1) },
			"legacy": func() (jupyter.Channel, *jupyter.Message, error) { return decodeLegacyText(leg) },
		} {
			gch, g, err := dec()
			if err != nil {
				t.Fatalf("%s %s: %v", name, ch, err)
			}
			if gch != ch || g.Header != m.Header || g.ParentHeader.MsgID != "p1" || !bytes.Equal(g.Content, m.Content) || !bytes.Equal(g.Metadata, m.Metadata) {
				t.Errorf("%s %s: got %v %+v", name, ch, gch, g)
			}
		}
	}
}

// TestLegacyBinaryBuffers: a legacy binary frame's buffers arrive.
func TestLegacyBinaryBuffers(t *testing.T) {
	js := []byte(`{"channel":"iopub","header":{"msg_id":"1","msg_type":"comm_msg"},"parent_header":{},"metadata":{},"content":{}}`)
	buf := []byte("BUF")
	b := []byte{0, 0, 0, 2}
	b = append(b, 0, 0, 0, 12)
	off := 12 + len(js)
	b = append(b, byte(off>>24), byte(off>>16), byte(off>>8), byte(off))
	b = append(append(b, js...), buf...)
	ch, m, err := decodeLegacyBinary(b)
	if err != nil || ch != jupyter.IOPub || len(m.Buffers) != 1 || string(m.Buffers[0]) != "BUF" {
		t.Fatalf("got %v %+v %v", ch, m, err)
	}
}

// FuzzDecode: no input makes a decoder panic or read out of bounds.
func FuzzDecode(f *testing.F) {
	m, _ := jupyter.NewMessage("s", "status", map[string]string{"execution_state": "idle"})
	v1, _ := encodeV1(jupyter.IOPub, m)
	leg, _ := encodeLegacy(jupyter.IOPub, m)
	f.Add(v1)
	f.Add(leg)
	f.Add([]byte{0, 0, 0, 1, 0, 0, 0, 8, '{', '}'})
	f.Fuzz(func(t *testing.T, b []byte) {
		decodeV1(b)
		decodeLegacyText(b)
		decodeLegacyBinary(b)
	})
}

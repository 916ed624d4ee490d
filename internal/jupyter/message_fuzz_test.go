package jupyter

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"slices"
	"testing"
)

// frameSep joins the frames of a fuzz input into one byte string.
var frameSep = []byte("|\x00|")

func joinFrames(frames [][]byte) []byte { return bytes.Join(frames, frameSep) }

// FuzzCodecDecode decodes arbitrary frames. Decode never panics; what it
// accepts under a key carries that key's HMAC over exactly the four signed
// frames, keeps the frames around them as identities and buffers, reads
// back the same after Encode, and is refused once any signed byte changes.
func FuzzCodecDecode(f *testing.F) {
	key := []byte("key")
	c := NewCodec(key)
	for _, m := range []*Message{
		{Header: Header{MsgID: "1", MsgType: "status", Session: "s", Version: ProtocolVersion}, Content: []byte(`{"execution_state":"idle"}`)},
		{Identities: [][]byte{[]byte("id1"), {}}, Header: Header{MsgID: "2", MsgType: "execute_reply"}, ParentHeader: Header{MsgID: "p", MsgType: "execute_request"},
			Metadata: []byte(`{"m":1}`), Content: []byte(`{"status":"ok"}`), Buffers: [][]byte{[]byte("buf"), []byte("<IDS|MSG>")}},
		{Header: Header{MsgID: "é\u2028\x00", Date: "2026-01-01T00:00:00Z"}},
	} {
		frames, err := c.Encode(m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(key, joinFrames(frames))
		f.Add([]byte{}, joinFrames(frames))
	}
	f.Add(key, []byte("<IDS|MSG>"))
	f.Add(key, []byte("a|\x00|<IDS|MSG>|\x00|sig|\x00|{}|\x00|{}|\x00|{}|\x00|{}"))
	f.Fuzz(func(t *testing.T, key, wire []byte) {
		frames := bytes.Split(wire, frameSep)
		c := NewCodec(key)
		m, err := c.Decode(frames)
		if err != nil {
			return
		}
		i := slices.IndexFunc(frames, func(b []byte) bool { return bytes.Equal(b, delimiter) })
		if i < 0 || len(frames)-i < 6 {
			t.Fatalf("accepted %d frames with the delimiter at %d", len(frames), i)
		}
		if len(key) > 0 {
			h := hmac.New(sha256.New, key)
			for _, p := range frames[i+2 : i+6] {
				h.Write(p)
			}
			if want := hex.EncodeToString(h.Sum(nil)); string(frames[i+1]) != want {
				t.Fatalf("accepted the signature %q; the HMAC is %s", frames[i+1], want)
			}
		}
		if !slices.EqualFunc(m.Identities, frames[:i], bytes.Equal) || !slices.EqualFunc(m.Buffers, frames[i+6:], bytes.Equal) ||
			!bytes.Equal(m.Metadata, frames[i+4]) || !bytes.Equal(m.Content, frames[i+5]) {
			t.Fatalf("the message does not keep its frames: %+v", m)
		}

		again, err := c.Encode(m)
		if err != nil {
			t.Fatalf("Encode of a decoded message: %v", err)
		}
		m2, err := c.Decode(again)
		if err != nil {
			t.Fatalf("a decoded message, encoded again, does not decode: %v", err)
		}
		orEmpty := func(b []byte) []byte {
			if len(b) == 0 {
				return emptyObject
			}
			return b
		}
		// Encode writes "{}" for a parent header without a msg_id: no
		// request is answered by a message that names none.
		wantParent := m.ParentHeader
		if wantParent.MsgID == "" {
			wantParent = Header{}
		}
		if m2.Header != m.Header || m2.ParentHeader != wantParent || !bytes.Equal(m2.Content, orEmpty(m.Content)) ||
			!bytes.Equal(m2.Metadata, orEmpty(m.Metadata)) || !slices.EqualFunc(m2.Identities, m.Identities, bytes.Equal) ||
			!slices.EqualFunc(m2.Buffers, m.Buffers, bytes.Equal) {
			t.Fatalf("encode and decode changed the message:\n got %+v\nwant %+v", m2, m)
		}

		if len(key) == 0 {
			return
		}
		for j := i + 2; j < i+6; j++ {
			for _, at := range []int{0, len(frames[j]) - 1} {
				if at < 0 {
					continue
				}
				bad := slices.Clone(frames)
				bad[j] = slices.Clone(frames[j])
				bad[j][at] ^= 0x20
				if _, err := c.Decode(bad); !errors.Is(err, ErrBadSignature) {
					t.Fatalf("a changed byte %d of frame %d was not refused as a bad signature: %v", at, j, err)
				}
			}
		}
	})
}

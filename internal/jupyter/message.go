// Package jupyter is the Jupyter messaging protocol (v5.3) over ZeroMQ:
// message framing, HMAC-SHA256 signing, connection files and the five
// sockets. It is the only package that sees a ZeroMQ type.
package jupyter

import (
	"bytes"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"sync"
	"time"
)

// ProtocolVersion is the messaging protocol version we speak.
const ProtocolVersion = "5.3"

// delimiter separates routing identities from the signed message parts.
var delimiter = []byte("<IDS|MSG>")

// Header is a message header (and, in ParentHeader, the header of the
// request a message answers).
type Header struct {
	MsgID    string `json:"msg_id"`
	Session  string `json:"session"`
	Username string `json:"username"`
	Date     string `json:"date"`
	MsgType  string `json:"msg_type"`
	Version  string `json:"version"`
}

// Message is one Jupyter message. Content and Metadata stay raw JSON so that
// the kernel package decodes only what it needs.
type Message struct {
	Identities   [][]byte
	Header       Header
	ParentHeader Header
	Metadata     json.RawMessage
	Content      json.RawMessage
	Buffers      [][]byte
}

// ErrBadSignature means a message's HMAC did not match: it is dropped.
var ErrBadSignature = errors.New("jupyter: bad message signature")

// Codec signs and verifies messages with one session key.
type Codec struct {
	key  []byte
	pool sync.Pool // of hash.Hash
}

// NewCodec returns a codec for key. An empty key disables signing, as the
// protocol allows; ipybox always uses a random key.
func NewCodec(key []byte) *Codec {
	c := &Codec{key: append([]byte(nil), key...)}
	c.pool.New = func() any { return hmac.New(sha256.New, c.key) }
	return c
}

func (c *Codec) sign(parts ...[]byte) []byte {
	if len(c.key) == 0 {
		return nil
	}
	h := c.pool.Get().(hash.Hash)
	defer c.pool.Put(h)
	h.Reset()
	for _, p := range parts {
		h.Write(p)
	}
	sum := h.Sum(nil)
	out := make([]byte, hex.EncodedLen(len(sum)))
	hex.Encode(out, sum)
	return out
}

var emptyObject = []byte("{}")

// Encode turns m into wire frames: identities, delimiter, signature, header,
// parent header, metadata, content, buffers.
func (c *Codec) Encode(m *Message) ([][]byte, error) {
	header, err := json.Marshal(m.Header)
	if err != nil {
		return nil, fmt.Errorf("jupyter: encode header: %w", err)
	}
	parent := emptyObject
	if m.ParentHeader.MsgID != "" {
		if parent, err = json.Marshal(m.ParentHeader); err != nil {
			return nil, fmt.Errorf("jupyter: encode parent header: %w", err)
		}
	}
	meta := []byte(m.Metadata)
	if len(meta) == 0 {
		meta = emptyObject
	}
	content := []byte(m.Content)
	if len(content) == 0 {
		content = emptyObject
	}
	frames := make([][]byte, 0, len(m.Identities)+6+len(m.Buffers))
	frames = append(frames, m.Identities...)
	frames = append(frames, delimiter, c.sign(header, parent, meta, content), header, parent, meta, content)
	frames = append(frames, m.Buffers...)
	return frames, nil
}

// Decode parses wire frames and verifies the signature over the raw bytes,
// in constant time, before anything is unmarshalled.
func (c *Codec) Decode(frames [][]byte) (*Message, error) {
	i := 0
	for i < len(frames) && !bytes.Equal(frames[i], delimiter) {
		i++
	}
	if i == len(frames) || len(frames)-i < 6 {
		return nil, fmt.Errorf("jupyter: malformed message: %d frames, delimiter at %d", len(frames), i)
	}
	sig, header, parent, meta, content := frames[i+1], frames[i+2], frames[i+3], frames[i+4], frames[i+5]
	if len(c.key) > 0 && !hmac.Equal(sig, c.sign(header, parent, meta, content)) {
		return nil, ErrBadSignature
	}
	m := &Message{
		Identities: frames[:i],
		Metadata:   json.RawMessage(meta),
		Content:    json.RawMessage(content),
		Buffers:    frames[i+6:],
	}
	if err := json.Unmarshal(header, &m.Header); err != nil {
		return nil, fmt.Errorf("jupyter: decode header: %w", err)
	}
	if len(parent) > 2 { // "{}" has no parent
		if err := json.Unmarshal(parent, &m.ParentHeader); err != nil {
			return nil, fmt.Errorf("jupyter: decode parent header: %w", err)
		}
	}
	return m, nil
}

// NewID returns a random message or session id (32 hex digits).
func NewID() string {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err) // crypto/rand never fails on Linux
	}
	return hex.EncodeToString(b[:])
}

// NewMessage builds a request of msgType in session with the given content.
func NewMessage(session, msgType string, content any) (*Message, error) {
	raw, err := json.Marshal(content)
	if err != nil {
		return nil, fmt.Errorf("jupyter: encode %s content: %w", msgType, err)
	}
	return &Message{
		Header: Header{
			MsgID:    NewID(),
			Session:  session,
			Username: "ipybox",
			Date:     time.Now().UTC().Format(time.RFC3339Nano),
			MsgType:  msgType,
			Version:  ProtocolVersion,
		},
		Content: raw,
	}, nil
}

package gateway

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/ipybox/ipybox/internal/jupyter"
)

// SubprotocolV1 is the binary kernel websocket protocol of Jupyter Server
// 2 (and of 1.23, where it is offered too).
const SubprotocolV1 = "v1.kernel.websocket.jupyter.org"

var channelNames = map[string]jupyter.Channel{
	"shell":   jupyter.Shell,
	"control": jupyter.Control,
	"stdin":   jupyter.Stdin,
	"iopub":   jupyter.IOPub,
}

func channelOf(name string) (jupyter.Channel, error) {
	ch, ok := channelNames[name]
	if !ok {
		return 0, fmt.Errorf("gateway: message on unknown channel %q", truncate(name, 40))
	}
	return ch, nil
}

var emptyObject = json.RawMessage("{}")

func orEmpty(r json.RawMessage) json.RawMessage {
	if len(r) == 0 {
		return emptyObject
	}
	return r
}

func parentJSON(m *jupyter.Message) (json.RawMessage, error) {
	if m.ParentHeader.MsgID == "" {
		return emptyObject, nil
	}
	return json.Marshal(m.ParentHeader)
}

// legacyMsg is a message in the legacy JSON frames.
type legacyMsg struct {
	Channel      string          `json:"channel"`
	Header       json.RawMessage `json:"header"`
	ParentHeader json.RawMessage `json:"parent_header"`
	Metadata     json.RawMessage `json:"metadata"`
	Content      json.RawMessage `json:"content"`
	Buffers      []any           `json:"buffers"`
}

// encodeLegacy is m on ch as a legacy text frame. ipybox sends no buffers.
func encodeLegacy(ch jupyter.Channel, m *jupyter.Message) ([]byte, error) {
	header, err := json.Marshal(m.Header)
	if err != nil {
		return nil, err
	}
	parent, err := parentJSON(m)
	if err != nil {
		return nil, err
	}
	return json.Marshal(legacyMsg{
		Channel: ch.String(), Header: header, ParentHeader: parent,
		Metadata: orEmpty(m.Metadata), Content: orEmpty(m.Content), Buffers: []any{},
	})
}

// encodeV1 is m on ch in the v1 binary layout: the number of offsets
// (uint64 LE), the offsets, then channel, header, parent header,
// metadata, content and the buffers; the last offset is the end.
func encodeV1(ch jupyter.Channel, m *jupyter.Message) ([]byte, error) {
	header, err := json.Marshal(m.Header)
	if err != nil {
		return nil, err
	}
	parent, err := parentJSON(m)
	if err != nil {
		return nil, err
	}
	parts := [][]byte{[]byte(ch.String()), header, parent, orEmpty(m.Metadata), orEmpty(m.Content)}
	parts = append(parts, m.Buffers...)
	n := len(parts) + 1
	size := 8 * (n + 1)
	for _, p := range parts {
		size += len(p)
	}
	out := make([]byte, 8*(n+1), size)
	binary.LittleEndian.PutUint64(out, uint64(n))
	off := uint64(8 * (n + 1))
	for i, p := range parts {
		binary.LittleEndian.PutUint64(out[8*(i+1):], off)
		off += uint64(len(p))
	}
	binary.LittleEndian.PutUint64(out[8*n:], off)
	for _, p := range parts {
		out = append(out, p...)
	}
	return out, nil
}

var errFrame = errors.New("gateway: malformed websocket message")

// decodeV1 parses a v1 binary frame. Every offset is checked against the
// frame before it is used: a hostile server cannot make it read out of
// bounds or allocate.
func decodeV1(b []byte) (jupyter.Channel, *jupyter.Message, error) {
	if len(b) < 8 {
		return 0, nil, errFrame
	}
	n := binary.LittleEndian.Uint64(b)
	// channel, header, parent, metadata, content, and the end: at least 6.
	if n < 6 || n > uint64(len(b)-8)/8 {
		return 0, nil, fmt.Errorf("%w: %d offsets in %d bytes", errFrame, n, len(b))
	}
	offs := make([]uint64, n)
	prev := 8 * (n + 1)
	for i := range offs {
		o := binary.LittleEndian.Uint64(b[8*(i+1):])
		if o < prev || o > uint64(len(b)) {
			return 0, nil, fmt.Errorf("%w: offset %d out of order or bounds", errFrame, i)
		}
		offs[i], prev = o, o
	}
	part := func(i int) []byte { return b[offs[i]:offs[i+1]] }
	ch, err := channelOf(string(part(0)))
	if err != nil {
		return 0, nil, err
	}
	m, err := message(part(1), part(2), part(3), part(4))
	if err != nil {
		return 0, nil, err
	}
	for i := 5; i+1 < len(offs); i++ {
		m.Buffers = append(m.Buffers, part(i))
	}
	return ch, m, nil
}

func message(header, parent, meta, content []byte) (*jupyter.Message, error) {
	m := &jupyter.Message{Metadata: json.RawMessage(meta), Content: json.RawMessage(content)}
	if err := json.Unmarshal(header, &m.Header); err != nil {
		return nil, fmt.Errorf("%w: header: %v", errFrame, err)
	}
	if len(parent) > 2 {
		if err := json.Unmarshal(parent, &m.ParentHeader); err != nil {
			return nil, fmt.Errorf("%w: parent header: %v", errFrame, err)
		}
	}
	if !json.Valid(content) {
		return nil, fmt.Errorf("%w: content is not JSON", errFrame)
	}
	return m, nil
}

// decodeLegacyText parses a legacy JSON frame.
func decodeLegacyText(b []byte) (jupyter.Channel, *jupyter.Message, error) {
	var l legacyMsg
	if err := json.Unmarshal(b, &l); err != nil {
		return 0, nil, fmt.Errorf("%w: %v", errFrame, err)
	}
	ch, err := channelOf(l.Channel)
	if err != nil {
		return 0, nil, err
	}
	m, err := message(l.Header, l.ParentHeader, orEmpty(l.Metadata), orEmpty(l.Content))
	return ch, m, err
}

// decodeLegacyBinary parses a legacy binary frame (a message with
// buffers): the number of parts (uint32 BE), their offsets, the JSON
// message, then the buffers.
func decodeLegacyBinary(b []byte) (jupyter.Channel, *jupyter.Message, error) {
	if len(b) < 4 {
		return 0, nil, errFrame
	}
	n := binary.BigEndian.Uint32(b)
	if n < 1 || uint64(n) > uint64(len(b)-4)/4 {
		return 0, nil, fmt.Errorf("%w: %d parts in %d bytes", errFrame, n, len(b))
	}
	offs := make([]uint32, n+1)
	prev := uint32(4 * (n + 1))
	for i := range n {
		o := binary.BigEndian.Uint32(b[4*(i+1):])
		if o < prev || uint64(o) > uint64(len(b)) {
			return 0, nil, fmt.Errorf("%w: offset %d out of order or bounds", errFrame, i)
		}
		offs[i], prev = o, o
	}
	offs[n] = uint32(len(b))
	ch, m, err := decodeLegacyText(b[offs[0]:offs[1]])
	if err != nil {
		return 0, nil, err
	}
	for i := uint32(1); i < n; i++ {
		m.Buffers = append(m.Buffers, b[offs[i]:offs[i+1]])
	}
	return ch, m, nil
}

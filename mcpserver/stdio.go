package mcpserver

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"regexp"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// maxRequest is the longest JSON-RPC message the server reads over stdio
// (16 MiB, the go-sdk's own bound), and the longest request body over
// HTTP (a longer one gets 413).
const maxRequest = 16 << 20

// StdioTransport is the server's stdio transport: newline-delimited
// JSON-RPC on stdin and stdout, with each message bounded by maxRequest.
// The go-sdk ends the connection, and with it the session and the kernel's
// state, on a message over its bound; here, a longer message is read
// through and dropped, and the client gets a JSON-RPC error for it (see
// limitRequests). Every request read before the end of input is answered
// before the connection ends (answerAll).
func StdioTransport() mcp.Transport {
	return answerAll{&mcp.IOTransport{
		Reader:        io.NopCloser(limitRequests(os.Stdin, maxRequest)),
		Writer:        nopWriteCloser{os.Stdout},
		MaxLineLength: -1, // limitRequests bounds every line
	}}
}

type nopWriteCloser struct{ io.Writer }

func (nopWriteCloser) Close() error { return nil }

// limitRequests passes the newline-delimited messages of r through, and
// replaces each line longer than limit bytes, which it reads through
// without holding it, by a request whose method says why it was refused,
// with the id of the line's request, so that the client gets a JSON-RPC
// error ("... unsupported") for its request instead of waiting forever. A
// line without a recognisable top-level id (a notification) is dropped.
func limitRequests(r io.Reader, limit int) io.Reader {
	return &requestLimiter{r: r, limit: limit, chunk: make([]byte, 64<<10)}
}

// idKeep is how much of an oversized line's start and end is kept, to
// find its id: clients write "id" near the start (go-sdk, Python) or as
// the last member (the TypeScript SDK).
const idKeep = 4 << 10

type requestLimiter struct {
	r     io.Reader
	limit int
	chunk []byte
	err   error

	line []byte // the current line, while it is within the limit
	out  []byte // ready to be read

	over       bool // the current line passed the limit
	head, tail []byte
	size       int64
}

func (l *requestLimiter) Read(p []byte) (int, error) {
	for len(l.out) == 0 {
		if l.err != nil {
			if len(l.line) > 0 && !l.over {
				l.out, l.line = l.line, nil // a last line without a newline
				break
			}
			return 0, l.err
		}
		n, err := l.r.Read(l.chunk)
		l.feed(l.chunk[:n])
		l.err = err
	}
	n := copy(p, l.out)
	l.out = l.out[n:]
	if len(l.out) == 0 {
		l.out = nil
	}
	return n, nil
}

// feed splits b into lines.
func (l *requestLimiter) feed(b []byte) {
	for len(b) > 0 {
		i := bytes.IndexByte(b, '\n')
		seg := b
		if i >= 0 {
			seg = b[:i]
		}
		l.add(seg)
		if i < 0 {
			return
		}
		l.endLine()
		b = b[i+1:]
	}
}

func (l *requestLimiter) add(seg []byte) {
	if !l.over {
		if len(l.line)+len(seg) <= l.limit {
			l.line = append(l.line, seg...)
			return
		}
		l.over = true
		l.size = int64(len(l.line))
		all := append(l.line, seg...)
		l.head = bytes.Clone(all[:min(len(all), idKeep)])
		l.tail = bytes.Clone(all[max(len(all)-idKeep, 0):])
		l.size += int64(len(seg))
		l.line = nil
		return
	}
	l.size += int64(len(seg))
	l.tail = append(l.tail, seg...)
	if len(l.tail) > 2*idKeep {
		l.tail = append(l.tail[:0], l.tail[len(l.tail)-idKeep:]...)
	}
}

func (l *requestLimiter) endLine() {
	if !l.over {
		l.out = append(append(l.out, l.line...), '\n')
		l.line = l.line[:0]
		return
	}
	if id := requestID(l.head, l.tail); id != "" {
		method := fmt.Sprintf("request of %d bytes refused: ipybox mcp reads messages of at most %s over stdio", l.size, sizeText(l.limit))
		l.out = fmt.Appendf(l.out, `{"jsonrpc":"2.0","id":%s,"method":%q,"params":{}}`+"\n", id, method)
	}
	l.over, l.head, l.tail, l.size = false, nil, nil, 0
}

var (
	// an "id" member at the start of the object, before "params"
	idAtStart = regexp.MustCompile(`"id"\s*:\s*(-?[0-9]+|"(?:[^"\\]|\\.)*")`)
	// an "id" member that ends the object
	idAtEnd = regexp.MustCompile(`"id"\s*:\s*(-?[0-9]+|"(?:[^"\\]|\\.)*")\s*}\s*$`)
)

// requestID finds the top-level id of an oversized request from its start
// and its end, or returns "".
func requestID(head, tail []byte) string {
	start := head
	if i := bytes.Index(start, []byte(`"params"`)); i >= 0 {
		start = start[:i]
	}
	if m := idAtStart.FindSubmatch(start); m != nil {
		return string(m[1])
	}
	if m := idAtEnd.FindSubmatch(bytes.TrimRight(tail, "\r")); m != nil {
		return string(m[1])
	}
	return ""
}

// sizeText says n bytes in MiB when it is a whole number of them.
func sizeText(n int) string {
	if n >= 1<<20 && n%(1<<20) == 0 {
		return fmt.Sprintf("%d MiB", n>>20)
	}
	return fmt.Sprintf("%d bytes", n)
}

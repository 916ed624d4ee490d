// Package linelog turns a child process's output stream into log lines.
package linelog

import (
	"bytes"
	"strings"
	"sync"
)

// MaxLine bounds one line, so that a process writing without newlines
// cannot grow the buffer without limit; a longer run is emitted in pieces.
const MaxLine = 16 << 10

// tailLines is how many recent lines Tail can return.
const tailLines = 8

// Writer is an io.Writer that hands each line written to it to Emit, and
// remembers the last few lines (to explain a crash). It is safe for
// concurrent use.
type Writer struct {
	// Emit receives each non-empty line, without its line ending. Nil
	// discards lines (Tail still works).
	Emit func(line string)

	mu   sync.Mutex
	buf  []byte
	tail []string
}

// Write implements io.Writer. It never fails.
func (w *Writer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = append(w.buf, p...)
	for {
		i := bytes.IndexByte(w.buf, '\n')
		if i < 0 {
			if len(w.buf) >= MaxLine {
				w.emit(w.buf[:MaxLine])
				w.buf = w.buf[MaxLine:]
				continue
			}
			break
		}
		w.emit(w.buf[:i])
		w.buf = w.buf[i+1:]
	}
	if len(w.buf) == 0 {
		w.buf = nil // do not pin a large array after a long line
	}
	return len(p), nil
}

// Flush emits a final line that has no newline.
func (w *Writer) Flush() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.buf) > 0 {
		w.emit(w.buf)
		w.buf = nil
	}
}

// Forget drops the lines remembered so far, so that Tail returns only
// what comes after (a start-up banner is no explanation of a crash).
func (w *Writer) Forget() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.tail = nil
}

// Tail returns up to n of the last lines (including an unfinished one),
// joined with " | ".
func (w *Writer) Tail(n int) string {
	w.mu.Lock()
	defer w.mu.Unlock()
	lines := w.tail
	if s := strings.TrimSpace(string(w.buf)); s != "" {
		lines = append(append([]string(nil), lines...), s)
	}
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}

func (w *Writer) emit(b []byte) {
	line := strings.TrimRight(string(b), "\r")
	if strings.TrimSpace(line) == "" {
		return
	}
	w.tail = append(w.tail, line)
	if len(w.tail) > tailLines {
		w.tail = w.tail[len(w.tail)-tailLines:]
	}
	if w.Emit != nil {
		w.Emit(line)
	}
}

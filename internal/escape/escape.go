// Package escape makes text that kernel code chose safe to show a person.
//
// A terminal or a client's dialog renders control characters and Unicode
// format characters: a carriage return, "\x1b[2K" (erase the line),
// "\x1b[8m" (invisible text) or a right-to-left override (U+202E) can hide
// or reorder the real shell command or tool arguments that a person is
// asked to approve, and "\x1b]52;c;…\x07" writes the clipboard. Text
// replaces each such character with a visible escape, so that what is
// shown is what would run. Writer does the same to a stream of output on
// its way to a terminal, but lets through what output needs and cannot
// move the cursor off its own line: carriage returns and colours.
//
//	fmt.Println(escape.Text("ls\x1b[2K")) // ls\x1b[2K
//
//	w := escape.NewWriter(os.Stdout)
//	io.WriteString(w, "\x1b[31mred\x1b[0m, not \x1b]52;c;Y2xpcA==\x07")
//	w.Flush() // red (in red), not \x1b]52;c;Y2xpcA==\x07
package escape

import (
	"fmt"
	"io"
	"sync"
	"unicode"
	"unicode/utf8"
)

// Text returns s with every character that could hide or reorder what is
// shown replaced by a visible escape: C0 controls but newline and tab
// ("\r", "\x1b"), DEL, C1 controls, Unicode format characters (bidi
// embeddings, overrides and isolates U+202A–U+202E and U+2066–U+2069, the
// marks U+200E/U+200F and U+061C, zero-width characters, U+FEFF, the soft
// hyphen), the line and paragraph separators U+2028 and U+2029, and bytes
// that are not UTF-8 ("\xff"). Newlines stay, so that a multi-line command
// shows every line; tabs stay. Ordinary text, including non-ASCII letters,
// is unchanged.
func Text(s string) string {
	var m machine
	b := m.feed(make([]byte, 0, len(s)+16), []byte(s))
	return string(m.end(b))
}

// Writer passes output on to a terminal with every control character and
// escape sequence made visible and inert, except:
//
//   - newline and tab;
//   - carriage return, which progress bars use: it moves the cursor to the
//     start of its own row, so it can only overwrite text of the same row,
//     never a line above it;
//   - SGR sequences of digits and semicolons ("\x1b[1;31m"), the colours of
//     tracebacks: they change how text is drawn, not where.
//
// Everything else a terminal acts on is escaped as Text spells it: other C0
// controls and DEL ("\x07", "\x08"), a lone ESC and the ESC of every other
// sequence (OSC, CSI with another final byte, DCS, APC, PM, SOS) as "\x1b"
// followed by the sequence's text, C1 controls U+0080–U+009F ("\x9b") and
// bytes that are not UTF-8. Unicode format characters pass unchanged: they
// join emoji and shape scripts, and a terminal does not act on them.
//
// A sequence or character split across writes is recognised: the Writer
// holds back an unfinished SGR sequence (at most 64 bytes; a longer one is
// escaped) or an unfinished UTF-8 character, and nothing else, so output is
// never delayed to a line's end. Colours can hide text (black on black,
// SGR 8): whoever writes to the terminal after the stream, such as a
// prompt, must first reset them, as Flush does.
//
// A Writer is safe for concurrent use.
type Writer struct {
	w   io.Writer
	mu  sync.Mutex
	m   machine
	buf []byte
}

// NewWriter returns a Writer that writes to w, a terminal.
func NewWriter(w io.Writer) *Writer {
	return &Writer{w: w, m: machine{term: true}}
}

// chunk bounds the input escaped at once, and so the Writer's buffer.
const chunk = 16 << 10

// Write escapes p and writes it to the underlying writer. It returns how
// many bytes of p were escaped and written in full.
func (w *Writer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for len(p) > 0 {
		c := p[:min(len(p), chunk)]
		if err := w.write(w.m.feed(w.buf[:0], c)); err != nil {
			return n, err
		}
		n += len(c)
		p = p[len(c):]
	}
	return n, nil
}

// Flush writes what the Writer holds back, escaped, as the sequence or
// character is unfinished, and, when SGR sequences may have changed the
// colours, the reset "\x1b[0m". What is written next to the terminal, by
// anyone, is then shown as it is. The Writer stays usable.
func (w *Writer) Flush() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.write(w.m.end(w.buf[:0]))
}

func (w *Writer) write(b []byte) error {
	w.buf = b
	if len(b) == 0 {
		return nil
	}
	_, err := w.w.Write(b)
	return err
}

// maxSGR bounds an SGR sequence, ESC and '[' included, that a Writer lets
// through: a longer one, or one that never ends, is escaped.
const maxSGR = 64

// resetSGR restores the default colours.
const resetSGR = "\x1b[0m"

// machine is the escaper's state between writes: one piece of code for the
// strict policy of Text (the zero value) and that of a terminal's Writer.
type machine struct {
	// term is the Writer's policy: carriage returns and SGR sequences
	// pass, and so do format characters.
	term bool
	// pend holds an unfinished UTF-8 character (no more than 3 bytes) or,
	// under term, an unfinished SGR sequence (ESC first; less than maxSGR
	// bytes).
	pend []byte
	// dirty is set when an SGR sequence that may change the colours has
	// passed, and cleared by a reset.
	dirty bool
}

// feed appends to dst the escaped form of p and returns it.
func (m *machine) feed(dst, p []byte) []byte {
	for i := 0; i < len(p); {
		if len(m.pend) > 0 {
			var again bool
			if dst, again = m.next(dst, p[i]); !again {
				i++
			}
			continue
		}
		j := i
		for j < len(p) && m.plain(p[j]) {
			j++
		}
		dst = append(dst, p[i:j]...)
		if i = j; i == len(p) {
			break
		}
		switch b := p[i]; {
		case b == 0x1b && m.term:
			m.pend = append(m.pend, b)
			i++
		case b < utf8.RuneSelf:
			dst = appendVisible(dst, rune(b))
			i++
		case !utf8.FullRune(p[i:]):
			m.pend = append(m.pend, p[i:]...)
			i = len(p)
		default:
			r, n := utf8.DecodeRune(p[i:])
			dst = m.appendRune(dst, r, p[i:i+n])
			i += n
		}
	}
	return dst
}

// next reads b after the held bytes. It reports whether b must be read
// again, from the ground state: it did not continue them, and they have
// been written out.
func (m *machine) next(dst []byte, b byte) ([]byte, bool) {
	if m.pend[0] != 0x1b {
		m.pend = append(m.pend, b)
		if !utf8.FullRune(m.pend) {
			return dst, false
		}
		r, n := utf8.DecodeRune(m.pend)
		if r == utf8.RuneError && n == 1 {
			// b broke a valid prefix: each held byte is not UTF-8.
			for _, c := range m.pend[:len(m.pend)-1] {
				dst = appendByte(dst, c)
			}
			m.pend = m.pend[:0]
			return dst, true
		}
		dst = m.appendRune(dst, r, m.pend)
		m.pend = m.pend[:0]
		return dst, false
	}
	switch {
	case len(m.pend) == 1 && b == '[',
		len(m.pend) > 1 && len(m.pend) < maxSGR && ('0' <= b && b <= '9' || b == ';'):
		m.pend = append(m.pend, b)
		return dst, false
	case len(m.pend) > 1 && b == 'm':
		m.dirty = !resets(m.pend[2:])
		dst = append(append(dst, m.pend...), b)
		m.pend = m.pend[:0]
		return dst, false
	}
	return m.drop(dst), true
}

// end appends the held bytes, escaped, and a reset if colours may have
// changed.
func (m *machine) end(dst []byte) []byte {
	dst = m.drop(dst)
	if m.dirty {
		dst = append(dst, resetSGR...)
		m.dirty = false
	}
	return dst
}

// drop appends the held bytes escaped and forgets them.
func (m *machine) drop(dst []byte) []byte {
	if len(m.pend) == 0 {
		return dst
	}
	if m.pend[0] == 0x1b {
		// After ESC come only '[' and the parameters: printable.
		dst = appendVisible(dst, 0x1b)
		dst = append(dst, m.pend[1:]...)
	} else {
		for _, c := range m.pend {
			dst = appendByte(dst, c)
		}
	}
	m.pend = m.pend[:0]
	return dst
}

// plain reports whether b is printable ASCII or a control that passes.
func (m *machine) plain(b byte) bool {
	return 0x20 <= b && b < 0x7f || b == '\n' || b == '\t' || b == '\r' && m.term
}

// appendRune appends r, whose encoding in the input is raw, or its escape.
func (m *machine) appendRune(dst []byte, r rune, raw []byte) []byte {
	switch {
	case r == utf8.RuneError && len(raw) == 1:
		return appendByte(dst, raw[0])
	case m.term && r != '\r' && control(r), !m.term && hidden(r):
		return appendVisible(dst, r)
	}
	return append(dst, raw...)
}

// resets reports whether SGR parameters only reset the colours: "", "0",
// "0;0".
func resets(params []byte) bool {
	for _, c := range params {
		if c != '0' && c != ';' {
			return false
		}
	}
	return true
}

// control reports whether r is a control character a terminal acts on,
// other than newline and tab: C0, DEL or C1.
func control(r rune) bool {
	return r < 0x20 && r != '\n' && r != '\t' || r == 0x7f || 0x80 <= r && r < 0xa0
}

// hidden reports whether Text must show r as an escape.
func hidden(r rune) bool {
	return control(r) || r == 0x2028 || r == 0x2029 || unicode.Is(unicode.Cf, r)
}

// appendVisible appends r spelled as an escape a person reads.
func appendVisible(dst []byte, r rune) []byte {
	switch {
	case r == '\r':
		return append(dst, `\r`...)
	case r < 0x100:
		return fmt.Appendf(dst, `\x%02x`, r)
	}
	return fmt.Appendf(dst, `\u%04x`, r)
}

// appendByte appends a byte that is not UTF-8, spelled as an escape.
func appendByte(dst []byte, c byte) []byte {
	return fmt.Appendf(dst, `\x%02x`, c)
}

package linelog

import (
	"strings"
	"testing"
)

func TestWriter(t *testing.T) {
	var got []string
	w := &Writer{Emit: func(l string) { got = append(got, l) }}
	for _, chunk := range []string{"a", "b\nc\r\n", "\n\n", "d"} {
		w.Write([]byte(chunk))
	}
	if strings.Join(got, ",") != "ab,c" {
		t.Errorf("lines = %q", got)
	}
	if tail := w.Tail(5); tail != "ab | c | d" {
		t.Errorf("tail = %q", tail)
	}
	w.Flush()
	if strings.Join(got, ",") != "ab,c,d" {
		t.Errorf("after Flush: %q", got)
	}
	if tail := w.Tail(2); tail != "c | d" {
		t.Errorf("tail(2) = %q", tail)
	}
}

func TestWriterBoundsLines(t *testing.T) {
	var got []string
	w := &Writer{Emit: func(l string) { got = append(got, l) }}
	w.Write([]byte(strings.Repeat("x", 2*MaxLine+5)))
	if len(got) != 2 || len(got[0]) != MaxLine || len(w.buf) != 5 {
		t.Errorf("emitted %d pieces, %d left buffered", len(got), len(w.buf))
	}
}

func TestForget(t *testing.T) {
	var w Writer
	w.Write([]byte("banner 1\nbanner 2\n"))
	w.Forget()
	w.Write([]byte("Traceback\nboom"))
	if got := w.Tail(5); got != "Traceback | boom" {
		t.Errorf("Tail after Forget = %q", got)
	}
}

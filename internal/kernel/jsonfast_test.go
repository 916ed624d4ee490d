package kernel

import (
	"encoding/json"
	"testing"
)

// FuzzDecodeStream checks that the fast decoder agrees with encoding/json
// on every input, valid or not.
func FuzzDecodeStream(f *testing.F) {
	for _, s := range []string{
		`{"name": "stdout", "text": "hello\n"}`,
		`{"name":"stderr","text":"tab\tquote\" back\\ slash\/ \u00e9 \ud83d\ude00"}`,
		`{"text": "x", "name": "stdout", "extra": "y"}`,
		`{"name": "stdout", "text": "\ud800"}`,
		`{"NAME": "a", "name": "b"}`,
		`{"name": "a", "name": "b"}`,
		`{"name": 1}`,
		`{}`,
		` { "name" : "a" } `,
		`{"name": "a"} x`,
		"{\"name\": \"\xff\"}",
		`{"name": "a\u0000b"}`,
		`{"text": "` + "\x01" + `"}`,
		`{"name": "stdout", "text": "ok"`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var want struct {
			Name string `json:"name"`
			Text string `json:"text"`
		}
		werr := json.Unmarshal(b, &want)
		name, text, ok := fastStream(b)
		if !ok {
			return // declined: decodeStream uses encoding/json itself
		}
		if werr != nil {
			t.Fatalf("fast path accepted %q, encoding/json: %v", b, werr)
		}
		if name != want.Name || text != want.Text {
			t.Fatalf("%q: fast (%q, %q), encoding/json (%q, %q)", b, name, text, want.Name, want.Text)
		}
	})
}

// FuzzPlainRun checks the word-at-a-time scan against a byte loop, from
// every start offset.
func FuzzPlainRun(f *testing.F) {
	for _, s := range []string{"", "abcdefghijklmnop\"", "0123456\\789", "x\x1fy", "\x7f\x80\xff\x20\x21\x5b\x5d\"", "aaaaaaaaaaaaaaaaaaaaaaa\n"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		for i := range len(b) + 1 {
			want := i
			for want < len(b) && b[want] != '"' && b[want] != '\\' && b[want] >= 0x20 {
				want++
			}
			if got := plainRun(b, i); got != want {
				t.Fatalf("plainRun(%q, %d) = %d, want %d", b, i, got, want)
			}
		}
	})
}

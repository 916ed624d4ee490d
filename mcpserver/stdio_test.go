package mcpserver

import (
	"bytes"
	"io"
	"strconv"
	"strings"
	"testing"
	"testing/iotest"
)

func TestLimitRequests(t *testing.T) {
	t.Parallel()
	big := strings.Repeat("x", 200)
	first := `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"code":"` + big + `","id":99}}`
	last := `{"method":"tools/call","params":{"code":"` + big + `","id":99},"jsonrpc":"2.0","id":"a\"b"}` + "\r"
	refused := func(id string, n int) string {
		return `{"jsonrpc":"2.0","id":` + id + `,"method":"request of ` + strconv.Itoa(n) + ` bytes refused: ipybox mcp reads messages of at most 100 bytes over stdio","params":{}}` + "\n"
	}
	tests := []struct {
		name, in, want string
	}{
		{"short lines pass", "{\"a\":1}\n{\"b\":2}\n", "{\"a\":1}\n{\"b\":2}\n"},
		{"a line at the limit passes", "{\"s\":\"" + strings.Repeat("y", 92) + "\"}\n", "{\"s\":\"" + strings.Repeat("y", 92) + "\"}\n"},
		{"id first (go-sdk, Python)", first + "\nnext\n", refused("7", len(first)) + "next\n"},
		{"id last (TypeScript)", last + "\n", refused(`"a\"b"`, len(last))},
		{"a notification is dropped", `{"jsonrpc":"2.0","method":"notifications/x","params":{"s":"` + big + `"}}` + "\nnext\n", "next\n"},
		{"a last line without a newline", "{\"a\":1}\n{\"b\":2}", "{\"a\":1}\n{\"b\":2}"},
	}
	for _, tc := range tests {
		for _, r := range []func(io.Reader) io.Reader{
			func(r io.Reader) io.Reader { return r },
			iotest.OneByteReader,
			iotest.HalfReader,
		} {
			got, err := io.ReadAll(limitRequests(r(strings.NewReader(tc.in)), 100))
			if err != nil || string(got) != tc.want {
				t.Errorf("%s:\n got %q, %v\nwant %q", tc.name, got, err, tc.want)
			}
		}
	}
}

// TestLimitRequestsMemory: a 64 MiB line is read through without being
// held.
func TestLimitRequestsMemory(t *testing.T) {
	t.Parallel()
	line := append(append([]byte(`{"jsonrpc":"2.0","id":1,"method":"m","params":{"s":"`), bytes.Repeat([]byte("z"), 64<<20)...), "\"}}\n"...)
	l := limitRequests(bytes.NewReader(line), 1<<20).(*requestLimiter)
	got, err := io.ReadAll(l)
	if err != nil || !bytes.Contains(got, []byte(`"id":1,"method":"request of`)) {
		t.Fatalf("%.200s, %v", got, err)
	}
	if cap(l.line) > 2<<20 || cap(l.tail) > 3*idKeep {
		t.Errorf("held %d bytes of the line and %d of its tail", cap(l.line), cap(l.tail))
	}
}

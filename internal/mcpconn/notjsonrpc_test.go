package mcpconn

import (
	"errors"
	"strings"
	"testing"
)

// TestNotJSONRPC: a connect that failed is blamed on the server's output
// when, and only when, that output is not JSON-RPC, judged from the
// output itself (the error's text is the SDK's, and may change).
func TestNotJSONRPC(t *testing.T) {
	long := `{"jsonrpc":"2.0","id":1,"result":{"protocolVersion":"2025-06-18","serverInfo":{"name":"` + strings.Repeat("x", 400)
	failed := errors.New("connect failed")
	for _, tc := range []struct {
		name, head string
		err        error
		blamed     bool
	}{
		{"a log line", "Listening on :3000\nmore\n", failed, true},
		{"a partial log line", "Starting", failed, true},
		{"a broken JSON line", "{not json}\n", failed, true},
		{"JSON-RPC", `{"jsonrpc":"2.0","id":1,"result":{}}` + "\n", failed, false},
		{"JSON-RPC after blank lines", "\n\r\n" + `{"jsonrpc":"2.0","id":1,"result":{}}` + "\n", failed, false},
		{"a long first line, cut by the head", long, failed, false},
		{"no output", "", failed, false},
		{"no failure", "Listening\n", nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := &stdioTransport{}
			st.head.Write([]byte(tc.head))
			got := st.notJSONRPC("srv", Config{Command: "srv"}, tc.err)
			if (got != nil) != tc.blamed {
				t.Errorf("blamed the output: %v, want %v", got, tc.blamed)
			}
		})
	}
}

package mcpserver

import (
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// sessionBusy reports whether session h runs a call or a cell now, as
// list_sessions says.
func sessionBusy(t *testing.T, cs *mcp.ClientSession, h string) bool {
	t.Helper()
	for _, s := range sessionInfos(t, cs) {
		if s.Session == h {
			return s.Busy
		}
	}
	t.Fatalf("session %s is not listed: %+v", h, sessionInfos(t, cs))
	return false
}

// waitSessionIdle waits until session h runs no call and no cell (a cell
// left at an approval ends when the approval times out), and fails t
// after d.
func waitSessionIdle(t *testing.T, cs *mcp.ClientSession, h string, d time.Duration) {
	t.Helper()
	for deadline := time.Now().Add(d); sessionBusy(t, cs, h); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("session %s still busy after %v", h, d)
		}
	}
}

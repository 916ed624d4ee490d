package mcpserver

import (
	"net/http"
	"strings"
	"testing"

	"github.com/ipybox/ipybox/internal/testenv"
)

// TestAttackOtherPrincipalsHandles: two principals (two tokens of one
// server). Bob, holding Alice's handle (it leaked through a transcript),
// cannot run in her session, close it, list it, or tell it from a forged
// or a closed handle: all get the same answer. Nor can he end her
// 2025-11-25 connection's kernel with a DELETE of its session ID. Alice's
// kernel keeps its state throughout.
func TestAttackOtherPrincipalsHandles(t *testing.T) {
	t.Parallel()
	testenv.NeedsPython(t)
	const aliceTok, bobTok = "alice-token-0123456789", "bob-token-0123456789"
	srv := newServer(t, &Options{Workspace: t.TempDir(), HTTP: HTTPOptions{Principals: map[string]string{"alice": aliceTok, "bob": bobTok}}})
	url := serveHTTP(t, srv)
	alice := connectHTTPAs(t, url, aliceTok, newVersion, nil)
	bob := connectHTTPAs(t, url, bobTok, newVersion, nil)
	h := createSession(t, alice)
	runIn(t, alice, h, "secret = 'alice'")
	closed := createSession(t, alice)
	call(t, alice, "close_session", map[string]any{"session": closed})
	forged := handlePrefix + strings.Repeat("A", 26)

	answer := func(handle string) string {
		res := call(t, bob, "execute_ipython_cell", map[string]any{"code": "print(secret)", "session": handle})
		if !res.IsError {
			t.Errorf("bob ran in %s: %q", handle, text(res))
		}
		return text(res)
	}
	theirs, fake, gone := answer(h), answer(forged), answer(closed)
	if theirs != fake || fake != gone || !strings.Contains(theirs, "unknown session") {
		t.Errorf("the answers differ or say too little:\n another's: %q\n forged:    %q\n closed:    %q", theirs, fake, gone)
	}
	for _, tool := range []string{"close_session", "reset"} {
		if res := call(t, bob, tool, map[string]any{"session": h}); !res.IsError || text(res) != theirs {
			t.Errorf("bob's %s of alice's handle: %q", tool, text(res))
		}
	}
	if res := call(t, bob, "list_sessions", map[string]any{}); strings.Contains(text(res), h) {
		t.Errorf("bob lists alice's session: %q", text(res))
	}
	// The same from a 2025-11-25 connection of Bob's.
	bobOld := connectHTTPAs(t, url, bobTok, legacyVersion, nil)
	if res := call(t, bobOld, "execute_ipython_cell", map[string]any{"code": "print(secret)", "session": h}); !res.IsError || text(res) != theirs {
		t.Errorf("bob, 2025-11-25: %q", text(res))
	}

	// Alice's 2025-11-25 connection, with a kernel; Bob DELETEs its ID.
	aliceOld := connectHTTPAs(t, url, aliceTok, legacyVersion, nil)
	run(t, aliceOld, "mine = 'kept'")
	req, _ := http.NewRequest(http.MethodDelete, url, nil)
	req.Header.Set("Mcp-Session-Id", aliceOld.ID())
	req.Header.Set("Authorization", "Bearer "+bobTok)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode == http.StatusNoContent {
		t.Errorf("bob's DELETE of alice's connection: %d", resp.StatusCode)
	}
	if got := run(t, aliceOld, "print(mine)"); got != "kept" {
		t.Errorf("alice's connection after bob's DELETE: %q", got)
	}
	if got := runIn(t, alice, h, "print(secret)"); got != "alice" {
		t.Errorf("alice's session after bob's attempts: %q", got)
	}
	http.DefaultClient.CloseIdleConnections()
}

// TestPrincipalTokens: each principal's token is accepted, on every
// request, and names its principal; a wrong one is refused.
func TestPrincipalTokens(t *testing.T) {
	t.Parallel()
	srv := newServer(t, &Options{
		Workspace: t.TempDir(),
		HTTP: HTTPOptions{
			AuthToken:  "default-token-0123456789",
			Principals: map[string]string{"ci": "ci-token-0123456789"},
		},
	})
	url := serveHTTP(t, srv)
	// A 2025-11-25 request, and a 2026-07-28 one (stateless: the token is
	// all there is).
	ping := `{"jsonrpc":"2.0","id":1,"method":"ping"}`
	list := `{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}`
	for _, body := range []string{ping, list} {
		for tok, want := range map[string]int{"default-token-0123456789": 200, "ci-token-0123456789": 200, "ci-token-012345678": 401, "": 401} {
			req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Accept", "application/json, text/event-stream")
			if body == list {
				req.Header.Set("Mcp-Protocol-Version", "2026-07-28")
				req.Header.Set("Mcp-Method", "tools/list")
			}
			if tok != "" {
				req.Header.Set("Authorization", "Bearer "+tok)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != want {
				t.Errorf("%s with token %q: %d, want %d", body[:40], tok, resp.StatusCode, want)
			}
		}
	}
	// Each session belongs to the principal whose token made it.
	ci := connectHTTPAs(t, url, "ci-token-0123456789", newVersion, nil)
	def := connectHTTPAs(t, url, "default-token-0123456789", newVersion, nil)
	h := createSession(t, ci)
	if res := call(t, def, "close_session", map[string]any{"session": h}); !res.IsError {
		t.Errorf("the default principal closed ci's session: %q", text(res))
	}
	if res := call(t, ci, "list_sessions", map[string]any{}); !strings.Contains(text(res), h) {
		t.Errorf("ci's sessions: %q", text(res))
	}
	if _, err := New(&Options{HTTP: HTTPOptions{Principals: map[string]string{"a": "same-token-0123456789", "b": "same-token-0123456789"}}}); err == nil || !strings.Contains(err.Error(), "same token") {
		t.Errorf("two principals with one token: %v", err)
	}
	if _, err := New(&Options{HTTP: HTTPOptions{Principals: map[string]string{"a b": "x-token-0123456789"}}}); err == nil {
		t.Error("a principal name with a space was accepted")
	}
	http.DefaultClient.CloseIdleConnections()
}

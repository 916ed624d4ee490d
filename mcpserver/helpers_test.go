package mcpserver

import (
	"archive/zip"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/ipybox/ipybox/internal/kernel"
	"github.com/ipybox/ipybox/internal/sandbox"
	"github.com/ipybox/ipybox/internal/testenv"
)

var shared struct {
	once sync.Once
	dir  string
}

// TestMain removes the shared workspace at the end.
func TestMain(m *testing.M) {
	// The sandbox re-executes this binary as its init.
	if len(os.Args) > 1 && os.Args[1] == sandbox.InitCommand {
		os.Exit(sandbox.InitMain(os.Args[2:]))
	}
	// The examples run kernels: without ipykernel they skip, as the tests
	// do, rather than fail on their output.
	testenv.SkipExamples("^Example", testenv.HavePython)
	code := m.Run()
	if shared.dir != "" {
		os.RemoveAll(shared.dir)
	}
	os.Exit(code)
}

// sharedWorkspace returns a workspace that the tests of this process share,
// so that its virtualenv is created once. Tests use names of their own in it.
func sharedWorkspace(t *testing.T) string {
	t.Helper()
	testenv.NeedsPython(t)
	shared.once.Do(func() {
		d, err := os.MkdirTemp("", "ipybox-mcpserver-test-")
		if err != nil {
			t.Fatal(err)
		}
		shared.dir, _ = filepath.EvalSymlinks(d)
	})
	return shared.dir
}

// newServer returns a server that is closed when t ends.
func newServer(t *testing.T, o *Options) *Server {
	t.Helper()
	if o.HTTP.AuthToken == "" && !o.HTTP.NoAuth {
		o.HTTP.AuthToken = testToken
	}
	if o.Sessions.StartTimeout == 0 {
		o.Sessions.StartTimeout = 90 * time.Second
	}
	// The tests register stdio servers through the tool, unsandboxed;
	// hostservers_test.go checks the default, with servers of its own.
	o.AllowHostServers = true
	srv, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := srv.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return srv
}

// connect opens a client session to srv over in-memory transports (the
// stdio path, Serve), at the go-sdk's latest protocol revision.
func connect(t *testing.T, srv *Server, copts *mcp.ClientOptions) *mcp.ClientSession {
	t.Helper()
	return connectWire(t, srv, "", copts, nil)
}

// connectAt is connect at a protocol revision ("": the latest).
func connectAt(t *testing.T, srv *Server, version string, copts *mcp.ClientOptions) *mcp.ClientSession {
	t.Helper()
	return connectWire(t, srv, version, copts, nil)
}

// connectWire is connectAt, with every message the client reads written to
// wire (when not nil) as it is read: what the server sent before a
// response is in wire when the call returns.
func connectWire(t *testing.T, srv *Server, version string, copts *mcp.ClientOptions, wire io.Writer) *mcp.ClientSession {
	t.Helper()
	ct, st := mcp.NewInMemoryTransports()
	served := make(chan error, 1)
	go func() { served <- srv.Serve(context.Background(), st) }()
	c := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, copts)
	var transport mcp.Transport = ct
	if wire != nil {
		transport = &mcp.LoggingTransport{Transport: ct, Writer: wire}
	}
	cs, err := c.Connect(t.Context(), transport, &mcp.ClientSessionOptions{ProtocolVersion: version})
	if err != nil {
		t.Fatal(err)
	}
	if version != "" && cs.InitializeResult().ProtocolVersion != version {
		t.Fatalf("negotiated %s, want %s", cs.InitializeResult().ProtocolVersion, version)
	}
	t.Cleanup(func() {
		cs.Close()
		select {
		case err := <-served:
			if err != nil {
				t.Errorf("Serve: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Errorf("Serve did not return after the client closed")
		}
	})
	return cs
}

// serveHTTP serves srv over streamable HTTP on a loopback port and returns
// the URL.
func serveHTTP(t *testing.T, srv *Server) string {
	t.Helper()
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(hs.Close)
	return hs.URL + "/mcp"
}

// testToken is the bearer token of test servers (newServer).
const testToken = "test-token-0123456789"

// The protocol revisions the tests speak.
const (
	legacyVersion = "2025-11-25" // transport sessions, elicitation requests
	newVersion    = "2026-07-28" // handles, multi round-trip results
)

// connectHTTP opens a client session to url, with testToken, at
// 2025-11-25: a transport session with an implicit session of its own.
func connectHTTP(t *testing.T, url string, copts *mcp.ClientOptions) *mcp.ClientSession {
	t.Helper()
	return connectHTTPAs(t, url, testToken, legacyVersion, copts)
}

// connectHTTPAs opens a client session to url with token, speaking
// version.
func connectHTTPAs(t *testing.T, url, token, version string, copts *mcp.ClientOptions) *mcp.ClientSession {
	t.Helper()
	c := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, copts)
	hc := &http.Client{Transport: testenv.Bearer{Token: token}}
	cs, err := c.Connect(t.Context(), &mcp.StreamableClientTransport{Endpoint: url, DisableStandaloneSSE: true, HTTPClient: hc}, &mcp.ClientSessionOptions{ProtocolVersion: version})
	if err != nil {
		t.Fatal(err)
	}
	if got := cs.InitializeResult().ProtocolVersion; got != version {
		t.Fatalf("negotiated %s, want %s", got, version)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

// call calls a tool and fails t on a protocol error.
func call(t *testing.T, cs *mcp.ClientSession, tool string, args any) *mcp.CallToolResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 120*time.Second)
	defer cancel()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: args})
	if err != nil {
		t.Fatalf("%s(%v): %v", tool, short(fmt.Sprint(args)), err)
	}
	return res
}

// run executes code and returns the text of a successful result.
func run(t *testing.T, cs *mcp.ClientSession, code string) string {
	t.Helper()
	res := call(t, cs, "execute_ipython_cell", map[string]any{"code": code})
	if res.IsError {
		t.Fatalf("execute %q: error result: %s", short(code), text(res))
	}
	return text(res)
}

func text(res *mcp.CallToolResult) string {
	var parts []string
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			parts = append(parts, tc.Text)
		}
	}
	return strings.Join(parts, "\n")
}

func short(s string) string {
	if len(s) > 200 {
		return s[:200] + "..."
	}
	return s
}

// kernels returns the pids of the ipykernel processes among the
// descendants of pid.
func kernels(t *testing.T, pid int) []int {
	t.Helper()
	var out []int
	desc := testenv.Descendants(pid)
	zyg := map[int]bool{}
	for _, p := range desc {
		if strings.Contains(p.Cmdline, kernel.ZygoteMarker) {
			zyg[p.Pid] = true
		}
	}
	for _, p := range desc {
		// A cold-started kernel names its connection file; a forked one
		// is a child of the fork server, with its command line.
		if strings.Contains(p.Cmdline, "kernel.json") || zyg[p.Pid] && zyg[p.PPid] {
			out = append(out, p.Pid)
		}
	}
	return out
}

// waitKernels waits until pid has n kernels, and fails t after d.
func waitKernels(t *testing.T, pid, n int, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		k := kernels(t, pid)
		if len(k) == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d kernel processes (%v), want %d", len(k), k, n)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// buildWheel writes a pure-Python wheel of the package in testdata/testpkg
// to dir and returns its file name. pip installs a wheel without an index
// or a build backend, so this works offline.
func buildWheel(t *testing.T, dir string) string {
	t.Helper()
	const name, ver = "ipybox_testpkg", "0.1"
	info := name + "-" + ver + ".dist-info/"
	files := map[string][]byte{
		info + "METADATA": []byte("Metadata-Version: 2.1\nName: ipybox-testpkg\nVersion: " + ver + "\n"),
		info + "WHEEL":    []byte("Wheel-Version: 1.0\nGenerator: ipybox-test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"),
	}
	src := filepath.Join("testdata", "testpkg", name)
	ents, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		files[name+"/"+e.Name()] = b
	}
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	var record strings.Builder
	for _, n := range names {
		w, err := zw.Create(n)
		if err != nil {
			t.Fatal(err)
		}
		w.Write(files[n])
		sum := sha256.Sum256(files[n])
		fmt.Fprintf(&record, "%s,sha256=%s,%d\n", n, base64.RawURLEncoding.EncodeToString(sum[:]), len(files[n]))
	}
	fmt.Fprintf(&record, "%sRECORD,,\n", info)
	w, _ := zw.Create(info + "RECORD")
	w.Write([]byte(record.String()))
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	file := name + "-" + ver + "-py3-none-any.whl"
	if err := os.WriteFile(filepath.Join(dir, file), buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return file
}

package mcpserver

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ipybox/ipybox"
	"github.com/ipybox/ipybox/internal/testenv"
)

// runProbe imports the probe server h's module in a kernel of srv and
// calls it: the server starts (or is refused) then.
func runProbe(t *testing.T, srv *Server) string {
	t.Helper()
	cs := connect(t, srv, nil)
	defer cs.Close()
	return run(t, cs, "import importlib\ntry:\n    m = importlib.import_module('mcptools.h.probe')\n    print(m.run(m.Params()))\nexcept Exception as e:\n    print('error', type(e).__name__, e)")
}

// writeRegistry writes servers.json of ws with the one server h, and the
// module mcptools/h/probe.py that a registration would have generated
// (by registering it on a server that allows host servers).
func writeOldRegistry(t *testing.T, ws string, entry map[string]any) {
	t.Helper()
	b, err := json.Marshal(map[string]any{"mcpServers": map[string]any{"h": entry}})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ws, ".ipybox", "servers.json"), b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestRegistryGatedAtEveryStart: a client's stdio server passes the gate
// at every start, under the flags and the policy of the run that starts
// it, wherever its entry comes from (variants of
// TestRedteam4RegistryOutlivesTheFlag): an entry of an older ipybox
// without "origin" (unsandboxed, or with a frozen policy that allowed
// more), and a sandboxed registration whose run had a wider policy than
// the next. servers.json records the client as the author and the
// sandbox as an intent, never a policy; a client cannot claim another
// origin.
func TestRegistryGatedAtEveryStart(t *testing.T) {
	t.Parallel()
	py := testenv.NeedsPython(t)
	testenv.NeedsTool(t, "bwrap")
	// seed registers h on a server that allows host servers, so that the
	// workspace has its module, then rewrites its entry as entry says.
	seed := func(t *testing.T, ws string, params map[string]any) {
		srv := newGatedServer(t, &Options{Workspace: ws, AllowHostServers: true})
		cs := connect(t, srv, nil)
		if res := call(t, cs, "register_mcp_server", map[string]any{"server_name": "h", "server_params": params}); res.IsError {
			t.Fatalf("register: %s", text(res))
		}
		cs.Close()
		srv.Close()
	}
	t.Run("old entry without origin, no sandbox here", func(t *testing.T) {
		ws := t.TempDir()
		mark, canary := hostFiles(t)
		seed(t, ws, probeParams(t, py, mark, canary))
		os.Remove(mark)
		writeOldRegistry(t, ws, probeParams(t, py, mark, canary))
		got := runProbe(t, newGatedServer(t, &Options{Workspace: ws}))
		if _, err := os.Stat(mark); err == nil {
			t.Fatal("an entry of an older ipybox (no origin) started on the host without --allow-host-servers")
		}
		if !strings.Contains(got, "--allow-host-servers") {
			t.Errorf("the refusal does not name --allow-host-servers: %s", short(got))
		}
	})
	t.Run("old entry with a frozen wide policy", func(t *testing.T) {
		ws := t.TempDir()
		mark, canary := hostFiles(t)
		seed(t, ws, probeParams(t, py, mark, canary))
		os.Remove(mark)
		wide := with(probeParams(t, py, mark, canary), "sandbox", map[string]any{"filesystem": map[string]any{"allowWrite": []string{filepath.Dir(mark)}}})
		writeOldRegistry(t, ws, wide)
		got := runProbe(t, newGatedServer(t, &Options{Workspace: ws, Sandbox: ipybox.DefaultSandbox()}))
		t.Logf("after the restart: %s", short(got))
		if _, err := os.Stat(mark); err == nil {
			t.Fatal("the recorded policy, not this run's, applied: the server wrote outside the workspace")
		}
	})
	t.Run("policy narrowed since the registration", func(t *testing.T) {
		ws := t.TempDir()
		mark, canary := hostFiles(t)
		wide := ipybox.DefaultSandbox()
		wide.Filesystem.AllowWrite = append(wide.Filesystem.AllowWrite, filepath.Dir(mark))
		first := newGatedServer(t, &Options{Workspace: ws, Sandbox: wide})
		cs := connect(t, first, nil)
		// A client that claims the operator's origin is the client still.
		if res := call(t, cs, "register_mcp_server", map[string]any{"server_name": "h", "server_params": with(probeParams(t, py, mark, canary), "origin", "")}); res.IsError {
			t.Fatalf("register: %s", text(res))
		}
		if res := call(t, cs, "register_mcp_server", map[string]any{"server_name": "h2", "server_params": with(probeParams(t, py, mark, canary), "origin", "operator")}); !res.IsError {
			t.Errorf("origin \"operator\" from a client was accepted: %s", short(text(res)))
		}
		cs.Close()
		first.Close()
		if _, err := os.Stat(mark); err != nil {
			t.Fatal("the first run's policy did not let the server write its mark: the test shows nothing")
		}
		os.Remove(mark)
		reg, err := os.ReadFile(filepath.Join(ws, ".ipybox", "servers.json"))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(reg), `"origin": "client"`) || !strings.Contains(string(reg), `"sandbox": true`) {
			t.Errorf("servers.json does not record the client and the sandbox as an intent: %s", reg)
		}
		got := runProbe(t, newGatedServer(t, &Options{Workspace: ws, Sandbox: ipybox.DefaultSandbox()}))
		t.Logf("after the restart: %s", short(got))
		if _, err := os.Stat(mark); err == nil {
			t.Fatal("after a restart with a narrower policy, the server ran under the registration's wider one")
		}
	})
}

// TestClientConfigNotFilled: variants of
// TestRedteam4RegisterReadsHostSecrets. A client's config gets no ${VAR}
// filling from ipybox's environment or .env in any field (a stdio
// server's env, an OAuth client secret), and the refusal says where such
// configs are filled; an entry registered under --allow-host-servers
// (which trusts clients as the operator, and fills) is not filled by a
// later run without the flag.
func TestClientConfigNotFilled(t *testing.T) {
	py := testenv.NeedsPython(t)
	const secret = "env-s3cret-77ab"
	t.Setenv("IPYBOX_RT4_FILL", secret)
	ws := t.TempDir()
	mark, _ := hostFiles(t)
	srv := newGatedServer(t, &Options{Workspace: ws, Sandbox: ipybox.DefaultSandbox()})
	cs := connect(t, srv, nil)
	for i, params := range []map[string]any{
		{"command": py, "args": []string{"-c", probeSrv}, "env": map[string]string{"MARK": mark, "CANARY": "${IPYBOX_RT4_FILL}"}},
		{"command": py, "args": []string{"-c", probeSrv, "${IPYBOX_RT4_FILL}"}},
		{"url": "http://127.0.0.1:9/mcp", "oauth": map[string]any{"clientId": "c", "clientSecret": "${IPYBOX_RT4_FILL}"}},
	} {
		res := call(t, cs, "register_mcp_server", map[string]any{"server_name": "f", "server_params": params})
		if !res.IsError || !strings.Contains(text(res), "--mcp-config") || strings.Contains(text(res), secret) {
			t.Errorf("variant %d: want a refusal that names --mcp-config: %s", i, short(text(res)))
		}
	}
	cs.Close()
	srv.Close()
	if _, err := os.Stat(mark); err == nil {
		t.Fatal("a server with a client's placeholder started")
	}

	// Under --allow-host-servers the placeholder is filled (the client
	// could read the environment on the host anyway); the next run
	// without the flag does not fill it.
	host := newGatedServer(t, &Options{Workspace: ws, AllowHostServers: true})
	cs = connect(t, host, nil)
	if res := call(t, cs, "register_mcp_server", map[string]any{"server_name": "h", "server_params": map[string]any{"command": py, "args": []string{"-c", probeSrv}, "env": map[string]string{"MARK": mark, "CANARY": "${IPYBOX_RT4_FILL}"}}}); res.IsError {
		t.Fatalf("register under --allow-host-servers: %s", text(res))
	}
	cs.Close()
	host.Close()
	os.Remove(mark)
	got := runProbe(t, newGatedServer(t, &Options{Workspace: ws, Sandbox: ipybox.DefaultSandbox()}))
	if !strings.Contains(got, "no ${VAR} filling") || strings.Contains(got, secret) {
		t.Errorf("a run without the flag started the client's server with its placeholder filled: %s", short(got))
	}
}

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

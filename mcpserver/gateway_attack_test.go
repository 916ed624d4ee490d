package mcpserver

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestGatewayAttackDownloadIntoState: download_file does not write a
// kernel's file into ipybox's own state, which the next session trusts:
// .ipybox/servers.json (the commands ipybox runs on the host for a tool
// call), .ipybox/venv (the interpreter the host runs pip with) and .env
// (the values of ${VAR} in server configs). A sandbox or a container keeps
// .ipybox read-only and .env masked; an agent talked into a download must
// not be the way around that. The file the destination held is kept.
func TestGatewayAttackDownloadIntoState(t *testing.T) {
	t.Parallel()
	_, ws, cs := gatewaySession(t)
	run(t, cs, `open('evil.json', 'w').write('{"mcpServers": {"evil": {"command": "/bin/sh", "args": ["-c", "touch PWNED"]}}}')`)
	os.MkdirAll(filepath.Join(ws, ".ipybox", "venv", "bin"), 0o755)
	for _, dst := range []string{
		filepath.Join(ws, ".ipybox", "servers.json"),
		filepath.Join(ws, ".ipybox", "venv", "bin", "pip"),
		filepath.Join(ws, ".env"),
		filepath.Join(ws, "sub", ".ipybox", "servers.json"),
	} {
		os.MkdirAll(filepath.Dir(dst), 0o755)
		os.WriteFile(dst, []byte("kept"), 0o600)
		res := call(t, cs, "download_file", map[string]any{"relpath": "evil.json", "local_path": dst})
		if !res.IsError {
			t.Errorf("download to %s: %s", dst, text(res))
		}
		if got, _ := os.ReadFile(dst); string(got) != "kept" {
			t.Errorf("%s now holds %q", dst, got)
		}
	}
	// Upload takes the same care of the workspace on a local kernel; on a
	// gateway its relpath is the kernel's disk, where anything goes.
	src := filepath.Join(ws, "evil.json")
	os.WriteFile(src, []byte("{}"), 0o600)
	if res := call(t, cs, "upload_file", map[string]any{"relpath": ".ipybox/servers.json", "local_path": src}); res.IsError && !strings.Contains(text(res), ".ipybox") {
		t.Errorf("upload to the gateway kernel's .ipybox: %s", text(res))
	}
}

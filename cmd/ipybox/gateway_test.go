package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ipybox/ipybox/internal/testenv"
)

// TestExecGateway: ipybox exec runs cells on a Jupyter Server, with the
// token from --gateway-token-file or $JUPYTER_GATEWAY_AUTH_TOKEN, never
// from argv; a token flag is refused without running anything.
func TestExecGateway(t *testing.T) {
	j := testenv.JupyterServer(t, nil)
	tokFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokFile, []byte(j.Token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	code := "import os\nx = 20\nprint(x + 1, os.environ.get('JUPYTER_GATEWAY_AUTH_TOKEN'))"
	out, errOut, exit := runBinary(t, "", "exec", "--gateway-url", j.URL, "--gateway-token-file", tokFile, "-c", code, "-c", "x * 2")
	if exit != 0 || out != "21 None\n40\n" {
		t.Errorf("token file: exit %d, stdout %q, stderr %q", exit, out, errOut)
	}
	// The ecosystem's variables, as jupyter's own clients read them.
	t.Setenv("JUPYTER_GATEWAY_URL", j.URL)
	t.Setenv("JUPYTER_GATEWAY_AUTH_TOKEN", j.Token)
	out, errOut, exit = runBinary(t, "", "exec", "-c", code)
	if exit != 0 || out != "21 None\n" {
		t.Errorf("environment: exit %d, stdout %q, stderr %q", exit, out, errOut)
	}
	// A wrong token: a clear error that does not print it.
	t.Setenv("JUPYTER_GATEWAY_AUTH_TOKEN", "not-the-token-4711")
	_, errOut, exit = runBinary(t, "", "exec", "-c", "1")
	if exit != exitFail || !strings.Contains(errOut, "refused the token") || strings.Contains(errOut, "not-the-token-4711") {
		t.Errorf("wrong token: exit %d, stderr %q", exit, errOut)
	}
}

func TestGatewayFlagErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"exec", "--gateway-token", "abc", "-c", "1"}, "--gateway-token-file"},
		{[]string{"mcp", "--gateway-token", "abc"}, "--gateway-token-file"},
		{[]string{"exec", "--gateway-kernel-name", "ir", "-c", "1"}, "add --gateway-url"},
		{[]string{"mcp", "--tool-server-addr", "10.0.0.5"}, "add --gateway-url"},
		{[]string{"exec", "--gateway-url", "http://127.0.0.1:1", "--sandbox", "-c", "1"}, "drop one of them or --gateway-url"},
		{[]string{"mcp", "--gateway-url", "http://127.0.0.1:1", "--sandbox"}, "drop one of --sandbox and --gateway-url"},
		{[]string{"exec", "--gateway-url", "http://127.0.0.1:1", "--gateway-token-file", "/nonexistent/tok", "-c", "1"}, "--gateway-token-file"},
	} {
		var out bytes.Buffer
		env := &cliEnv{stdin: strings.NewReader(""), stdout: &out, stderr: &out, getenv: func(string) string { return "" }}
		if code := run(context.Background(), env, tc.args); code != exitUsage {
			t.Errorf("%q: exit %d, want %d (%s)", tc.args, code, exitUsage, out.String())
		}
		if !strings.Contains(out.String(), tc.want) {
			t.Errorf("%q: output %q does not contain %q", tc.args, out.String(), tc.want)
		}
	}
}

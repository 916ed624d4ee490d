//go:build !windows

package main

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/ipybox/ipybox/internal/trusted/trustedtest"
)

// TestAttackUntrustedFiles is the attack of issue 34.5 on the CLI: a token
// file, approval policy, approval log or state folder that another user
// owns, or that group or others can write (or a folder above it), is
// refused, with the path and the fix; a token file that others can read
// is used with a warning. Each variant goes through the command itself:
// ipybox mcp, whose stdio server ends at the end of its (empty) input.
func TestAttackUntrustedFiles(t *testing.T) {
	t.Parallel()
	const token = "0123456789abcdef0123456789abcdef"
	ws := t.TempDir()
	check := func(t *testing.T, what string, v trustedtest.Variant, args ...string) {
		t.Helper()
		// A command that wrongly accepts --http serves until stopped.
		ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
		defer cancel()
		var out, errb bytes.Buffer
		code := run(ctx, &cliEnv{stdin: strings.NewReader(""), stdout: &out, stderr: &errb, getenv: os.Getenv},
			append([]string{"mcp", "--no-sandbox", "--workspace", ws}, args...))
		errOut := errb.String()
		refused := code != exitOK
		switch {
		case v.Want == trustedtest.Refuse && (!refused || !strings.Contains(errOut, v.Path) || !strings.Contains(errOut, v.Fix)):
			t.Errorf("%s, %s: exit %d, stderr %q; want a refusal that names %s and %q", what, v.Name, code, errOut, v.Path, v.Fix)
		case v.Want != trustedtest.Refuse && refused:
			t.Errorf("%s, %s: exit %d, stderr %q; want it accepted", what, v.Name, code, errOut)
		}
	}
	t.Run("approval policy", func(t *testing.T) {
		t.Parallel()
		for _, v := range trustedtest.Variants(t, false, false, []byte("allow tool a.b\n")) {
			check(t, "--approval-policy", v, "--approval-policy", v.Path, "--approval-log", "none")
		}
	})
	t.Run("approval log", func(t *testing.T) {
		t.Parallel()
		for _, v := range trustedtest.Variants(t, false, false, nil) {
			check(t, "--approval-log", v, "--approval-policy", "none", "--approval-log", v.Path)
		}
	})
	t.Run("state folder", func(t *testing.T) {
		t.Parallel()
		for _, v := range trustedtest.Variants(t, true, false, nil) {
			check(t, "--state-dir", v, "--state-dir", v.Path, "--approval-policy", "none", "--approval-log", "none")
		}
	})
	t.Run("token file", func(t *testing.T) {
		t.Parallel()
		for _, v := range trustedtest.Variants(t, false, true, []byte(token+"\n")) {
			if v.Missing {
				continue // a missing token file is an error of its own
			}
			// A refusal ends the command before it serves. (The token
			// file's read follows no link at all: that refusal comes
			// first.)
			if v.Want == trustedtest.Refuse {
				if strings.HasPrefix(v.Name, "a link") {
					v.Fix = "symbolic link"
				}
				check(t, "--auth-token-file", v, "--http", "127.0.0.1:0", "--auth-token-file", v.Path)
				continue
			}
			// What is accepted would serve until stopped: its flags are
			// read as the command reads them.
			var errb bytes.Buffer
			f := &mcpFlags{httpAddr: "127.0.0.1:0", authTokenFile: v.Path}
			err := f.auth(&cliEnv{stderr: &errb, getenv: os.Getenv})
			warned := strings.Contains(errb.String(), "chmod go-r "+v.Path)
			if err != nil || f.principals["default"] != token || warned != (v.Want == trustedtest.Warn) {
				t.Errorf("--auth-token-file, %s: %v, principals %v, stderr %q; want it accepted (warned: %v)", v.Name, err, f.principals, errb.String(), v.Want == trustedtest.Warn)
			}
		}
	})
}

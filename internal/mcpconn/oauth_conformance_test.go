package mcpconn

import (
	"bytes"
	"context"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ipybox/ipybox/internal/testenv"
)

// TestOAuthConformance runs the MCP conformance suite's client auth
// scenarios (@modelcontextprotocol/conformance, pinned in tools/npm) against
// internal/mcptest/cmd/conformance-client, which connects through this
// package as ipybox does. The MCP Go SDK's own conformance client passes
// the 14 scenarios of the auth suite with 229 checks; so must we, and the
// extension scenario of the client credentials grant too.
func TestOAuthConformance(t *testing.T) {
	t.Parallel()
	node := testenv.NPMBin(t, "node")
	conf := testenv.NPMBin(t, "conformance")
	client := filepath.Join(t.TempDir(), "conformance-client")
	build := exec.Command("go", "build", "-o", client, "./internal/mcptest/cmd/conformance-client")
	build.Dir = testenv.RepoRoot(t)
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build conformance-client: %v\n%s", err, out)
	}
	suite := func(args ...string) string {
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, node, append([]string{conf, "client", "--command", client, "-o", t.TempDir()}, args...)...)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		err := cmd.Run()
		if err != nil {
			t.Errorf("conformance %v: %v\n%s", args, err, out.String())
		}
		return out.String()
	}

	out := suite("--suite", "auth")
	i := strings.Index(out, "=== SUITE SUMMARY ===")
	if i < 0 {
		t.Fatalf("no summary:\n%s", out)
	}
	summary := out[i:]
	t.Logf("%s", summary)
	scenarios := map[string]int{ // the checks the Go SDK's client passes
		"metadata-default": 14, "metadata-var1": 14, "metadata-var2": 14, "metadata-var3": 14,
		"basic-cimd": 14, "scope-from-www-authenticate": 15, "scope-from-scopes-supported": 15,
		"scope-omitted-when-undefined": 15, "scope-step-up": 24, "scope-retry-limit": 19,
		"token-endpoint-auth-basic": 19, "token-endpoint-auth-post": 19, "token-endpoint-auth-none": 19,
		"pre-registration": 14,
	}
	total := 0
	for s, min := range scenarios {
		m := regexp.MustCompile(`✓ auth/` + regexp.QuoteMeta(s) + `: (\d+) passed, 0 failed\n`).FindStringSubmatch(summary)
		if m == nil {
			t.Errorf("scenario auth/%s did not pass cleanly (no warnings either)", s)
			continue
		}
		n, _ := strconv.Atoi(m[1])
		if n < min {
			t.Errorf("scenario auth/%s: %d checks passed, the Go SDK's client passes %d", s, n, min)
		}
		total += n
	}
	if total < 229 {
		t.Errorf("%d checks passed in all, the Go SDK's client passes 229", total)
	}
	if !strings.Contains(summary, "0 failed, 0 warnings") {
		t.Errorf("failures or warnings in the auth suite")
	}

	// The client credentials grant (an extension scenario, outside the
	// suite), which the Go SDK's conformance client does not configure.
	cc := suite("--scenario", "auth/client-credentials-basic")
	if !regexp.MustCompile(`Passed: (\d+)/(\d+), 0 failed`).MatchString(cc) {
		t.Errorf("auth/client-credentials-basic:\n%s", cc)
	}
}

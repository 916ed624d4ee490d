package main

import (
	"bufio"
	"context"
	"encoding/json"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/ipybox/ipybox/internal/mcpconn"
	"github.com/ipybox/ipybox/internal/sandbox"
	"github.com/ipybox/ipybox/internal/testenv"
)

// TestDocCommands runs the `bin/ipybox exec ... -c` lines of the README and
// the docs with this binary. A line whose comment names an error
// ("# PermissionError") must fail with it; the others must succeed.
func TestDocCommands(t *testing.T) {
	t.Parallel()
	testenv.NeedsPython(t)
	testenv.NeedsTool(t, "bwrap")
	bin := filepath.Join(t.TempDir(), "bin")
	os.Mkdir(bin, 0o755)
	// bin/ipybox is this test binary acting as main.
	wrapper := "#!/bin/sh\nIPYBOX_TEST_AS_MAIN=1 exec " + os.Args[0] + " \"$@\"\n"
	os.WriteFile(filepath.Join(bin, "ipybox"), []byte(wrapper), 0o755)
	n := 0
	for _, doc := range []string{"../../README.md", "../../docs/sandbox.md", "../../docs/tools.md"} {
		f, err := os.Open(doc)
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			line := strings.TrimSpace(sc.Text())
			if !strings.HasPrefix(line, "bin/ipybox exec") || !strings.Contains(line, " -c ") || strings.Contains(line, "...") || strings.Contains(line, "…") {
				continue
			}
			cmdline, comment, _ := strings.Cut(line, " #")
			cmdline = strings.TrimSpace(cmdline)
			wantErr := ""
			if w := strings.Fields(comment); len(w) > 0 && strings.HasSuffix(w[0], "Error") {
				wantErr = w[0]
			}
			n++
			t.Run(cmdline, func(t *testing.T) {
				cmd := exec.CommandContext(context.Background(), "sh", "-c", cmdline)
				cmd.Dir = filepath.Dir(bin)
				out, err := cmd.CombinedOutput()
				if wantErr == "" && err != nil {
					t.Errorf("%s: %v\n%s", doc, err, out)
				}
				if wantErr != "" && (err == nil || !strings.Contains(string(out), wantErr)) {
					t.Errorf("%s: want %s, got %v\n%s", doc, wantErr, err, out)
				}
			})
		}
		f.Close()
	}
	if n < 3 {
		t.Errorf("found only %d runnable commands in the docs", n)
	}
}

// TestDocSandboxSettings parses the JSON examples of docs/sandbox.md.
func TestDocSandboxSettings(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("../../docs/sandbox.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks := strings.Split(string(b), "```json\n")[1:]
	if len(blocks) != 2 {
		t.Fatalf("%d json examples", len(blocks))
	}
	settings, _, _ := strings.Cut(blocks[0], "```")
	if _, err := sandbox.ParseConfig([]byte(settings)); err != nil {
		t.Errorf("settings example: %v", err)
	}
	servers, _, _ := strings.Cut(blocks[1], "```")
	var file struct {
		Servers map[string]json.RawMessage `json:"mcpServers"`
	}
	if err := json.Unmarshal([]byte(servers), &file); err != nil || len(file.Servers) != 1 {
		t.Fatalf("servers example: %v", err)
	}
	for name, raw := range file.Servers {
		cfg, err := mcpconn.ParseConfig(raw)
		if err != nil || !cfg.SandboxRequested() {
			t.Errorf("server %s: %v (sandbox requested: %v)", name, err, cfg.SandboxRequested())
		}
	}
}

// TestDocClientConfigs parses every mcpServers example of the README and
// docs/mcp.md with the loader --mcp-config uses.
func TestDocClientConfigs(t *testing.T) {
	t.Parallel()
	n := 0
	for _, doc := range []string{"../../README.md", "../../docs/mcp.md"} {
		b, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		for _, block := range strings.Split(string(b), "```json\n")[1:] {
			js, _, _ := strings.Cut(block, "```")
			if !strings.Contains(js, "mcpServers") {
				continue
			}
			p := filepath.Join(t.TempDir(), "c.json")
			os.WriteFile(p, []byte(js), 0o600)
			if _, err := loadMCPConfig(p); err != nil {
				t.Errorf("%s: %v\n%s", doc, err, js)
			}
			n++
		}
	}
	if n < 2 {
		t.Errorf("found %d client configs", n)
	}
}

// TestDocJSONEvents: the README's table of `exec --json` events lists
// exactly the event types exec writes.
func TestDocJSONEvents(t *testing.T) {
	t.Parallel()
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	src, err := os.ReadFile("exec.go")
	if err != nil {
		t.Fatal(err)
	}
	documented := map[string]bool{}
	_, table, _ := strings.Cut(string(readme), "| `type` | fields |")
	table, _, _ = strings.Cut(table, "\n\n")
	for _, m := range regexp.MustCompile("(?m)^\\| `([a-z_]+)` \\|").FindAllStringSubmatch(table, -1) {
		documented[m[1]] = true
	}
	written := map[string]bool{}
	for _, m := range regexp.MustCompile(`jsonEvent\{Type: "([a-z_]+)"`).FindAllStringSubmatch(string(src), -1) {
		written[m[1]] = true
	}
	if len(written) == 0 || !maps.Equal(documented, written) {
		t.Errorf("README documents %v; exec writes %v", slices.Sorted(maps.Keys(documented)), slices.Sorted(maps.Keys(written)))
	}
}

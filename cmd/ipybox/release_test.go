package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/ipybox/ipybox/internal/testenv"
)

// registryName is the name ipybox has in the official MCP registry: the
// namespace io.github.ipybox is proven by the GitHub organisation.
const registryName = "io.github.ipybox/ipybox"

func readRepoFile(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(testenv.RepoRoot(t), filepath.FromSlash(name)))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func unmarshalRepoFile(t *testing.T, name string, v any) {
	t.Helper()
	if err := json.Unmarshal(readRepoFile(t, name), v); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
}

// serverJSON is the part of server.json the tests read.
type serverJSON struct {
	Name     string `json:"name"`
	Version  string `json:"version"`
	Packages []struct {
		RegistryType string `json:"registryType"`
		Identifier   string `json:"identifier"`
		Version      string `json:"version"`
		RuntimeHint  string `json:"runtimeHint"`
		Transport    struct {
			Type string `json:"type"`
		} `json:"transport"`
		PackageArguments []struct {
			Value string `json:"value"`
		} `json:"packageArguments"`
	} `json:"packages"`
}

// TestVersionsAgree checks that every file stating ipybox's version says
// release (version.go): the Python package, the two plugins and their
// marketplace, and server.json with its PyPI package and its image tag.
// The wheels (python/wheel_test.go) and the image (TestImageLabels) are
// checked where they are built. It also checks that the scripts that stamp
// release into the builds (scripts/wheels.sh, scripts/image.sh) read it
// from version.go, by running the same extraction.
func TestVersionsAgree(t *testing.T) {
	t.Parallel()
	says := func(where, got string) {
		t.Helper()
		if got != release {
			t.Errorf("%s says version %q; cmd/ipybox/version.go's release is %q", where, got, release)
		}
	}

	m := regexp.MustCompile(`(?m)^__version__ = "([^"]*)"$`).FindSubmatch(readRepoFile(t, "python/ipybox/_version.py"))
	if m == nil {
		t.Error(`python/ipybox/_version.py has no __version__ = "..." line`)
	} else {
		says("python/ipybox/_version.py", string(m[1]))
	}
	if !strings.Contains(string(readRepoFile(t, "python/pyproject.toml")), `version = { attr = "ipybox._version.__version__" }`) {
		t.Error("python/pyproject.toml does not take its version from ipybox/_version.py")
	}

	for _, p := range []string{"plugin/.claude-plugin/plugin.json", "plugin-unsandboxed/.claude-plugin/plugin.json"} {
		var plugin struct{ Version string }
		unmarshalRepoFile(t, p, &plugin)
		says(p, plugin.Version)
	}
	var market struct {
		Plugins []struct{ Name, Version string }
	}
	unmarshalRepoFile(t, ".claude-plugin/marketplace.json", &market)
	if len(market.Plugins) == 0 {
		t.Error(".claude-plugin/marketplace.json lists no plugin")
	}
	for _, p := range market.Plugins {
		says(".claude-plugin/marketplace.json "+p.Name, p.Version)
	}

	var sj serverJSON
	unmarshalRepoFile(t, "server.json", &sj)
	says("server.json", sj.Version)
	kinds := map[string]bool{}
	for _, p := range sj.Packages {
		kinds[p.RegistryType] = true
		switch p.RegistryType {
		case "pypi":
			says("server.json's PyPI package", p.Version)
		case "oci":
			_, tag, _ := strings.Cut(p.Identifier, ":")
			says("server.json's image "+p.Identifier, tag)
		}
	}
	if !kinds["pypi"] || !kinds["oci"] {
		t.Errorf("server.json names packages of kinds %v; want pypi and oci", kinds)
	}

	// The scripts' extraction, run on version.go.
	sed := testenv.NeedsTool(t, "sed")
	for _, script := range []string{"scripts/wheels.sh", "scripts/image.sh"} {
		expr := `s/^const release = "\(.*\)"$/\1/p`
		if !strings.Contains(string(readRepoFile(t, script)), "sed -n '"+expr+"' cmd/ipybox/version.go") {
			t.Errorf("%s does not read the release with sed -n '%s' cmd/ipybox/version.go", script, expr)
		}
		out, err := exec.Command(sed, "-n", expr, filepath.Join(testenv.RepoRoot(t), "cmd", "ipybox", "version.go")).Output()
		if err != nil {
			t.Fatal(err)
		}
		says(script+"'s extraction", strings.TrimSpace(string(out)))
	}
}

// TestServerJSON validates server.json against the MCP registry's
// published schema (testdata/mcp-registry, and its README for where it
// came from), and checks what the registry checks beyond it: that the
// PyPI package's README names the server (mcp-name:), that the image's
// label does, and that each package runs `ipybox mcp` over stdio. Broken
// copies of server.json must fail the same validation.
func TestServerJSON(t *testing.T) {
	t.Parallel()
	var schema jsonschema.Schema
	if err := json.Unmarshal(readRepoFile(t, "cmd/ipybox/testdata/mcp-registry/server.schema.json"), &schema); err != nil {
		t.Fatal(err)
	}
	resolved, err := schema.Resolve(nil)
	if err != nil {
		t.Fatalf("resolving the registry's schema: %v", err)
	}
	raw := readRepoFile(t, "server.json")
	var doc map[string]any
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	if err := resolved.Validate(doc); err != nil {
		t.Errorf("server.json does not validate against the registry's schema: %v", err)
	}
	if got := doc["$schema"]; got != schema.ID {
		t.Errorf("server.json's $schema = %v; the vendored schema is %s", got, schema.ID)
	}

	// The validation bites: each of these breaks a rule of the schema.
	for name, breakIt := range map[string]func(d map[string]any){
		"no name":                     func(d map[string]any) { delete(d, "name") },
		"a name without slash":        func(d map[string]any) { d["name"] = "ipybox" },
		"a long description":          func(d map[string]any) { d["description"] = strings.Repeat("x", 101) },
		"package version latest":      func(d map[string]any) { pkg(d, "pypi")["version"] = "latest" },
		"a package without transport": func(d map[string]any) { delete(pkg(d, "pypi"), "transport") },
		"an unknown transport": func(d map[string]any) {
			pkg(d, "oci")["transport"] = map[string]any{"type": "carrier-pigeon"}
		},
	} {
		var broken map[string]any
		json.Unmarshal(raw, &broken)
		breakIt(broken)
		if err := resolved.Validate(broken); err == nil {
			t.Errorf("server.json with %s validates; the schema check is not biting", name)
		}
	}

	var sj serverJSON
	unmarshalRepoFile(t, "server.json", &sj)
	if sj.Name != registryName {
		t.Errorf("server.json's name = %q, want %q", sj.Name, registryName)
	}
	for _, p := range sj.Packages {
		if p.Transport.Type != "stdio" {
			t.Errorf("%s package: transport %q; ipybox mcp speaks stdio when run this way", p.RegistryType, p.Transport.Type)
		}
		switch p.RegistryType {
		case "pypi":
			// uvx ipybox mcp: the registry's clients append packageArguments.
			if p.Identifier != "ipybox" || p.RuntimeHint != "uvx" || len(p.PackageArguments) != 1 || p.PackageArguments[0].Value != "mcp" {
				t.Errorf("PyPI package %+v; want uvx ipybox mcp", p)
			}
		case "oci":
			// The image's ENTRYPOINT and CMD already run ipybox mcp.
			if !strings.HasSuffix(strings.Split(p.Identifier, ":")[0], "/ipybox") {
				t.Errorf("image %q is not an ipybox repository", p.Identifier)
			}
		}
	}
	// The registry proves the PyPI package is ours by this line in its
	// README (the wheel's long description), and the image by its label.
	if want := "mcp-name: " + registryName; !strings.Contains(string(readRepoFile(t, "python/README.md")), want) {
		t.Errorf("python/README.md lacks %q", want)
	}
	if want := `io.modelcontextprotocol.server.name="` + registryName + `"`; !strings.Contains(string(readRepoFile(t, "Dockerfile")), want) {
		t.Errorf("Dockerfile lacks the label %s", want)
	}
}

// pkg returns server.json's package of registry type kind.
func pkg(d map[string]any, kind string) map[string]any {
	for _, p := range d["packages"].([]any) {
		if p := p.(map[string]any); p["registryType"] == kind {
			return p
		}
	}
	panic("server.json has no " + kind + " package")
}

// TestImageLabels checks the built image (scripts/image.sh): its version
// label and its binary's `ipybox version` say release, and its
// io.modelcontextprotocol.server.name label is server.json's name.
func TestImageLabels(t *testing.T) {
	t.Parallel()
	img := testenv.NeedsDocker(t)
	docker := testenv.NeedsTool(t, "docker")
	out, err := exec.Command(docker, "image", "inspect", "-f", "{{json .Config.Labels}}", img).Output()
	if err != nil {
		t.Fatalf("docker image inspect %s: %v", img, err)
	}
	var labels map[string]string
	if err := json.Unmarshal(out, &labels); err != nil {
		t.Fatalf("labels %s: %v", out, err)
	}
	if got := labels["org.opencontainers.image.version"]; got != release {
		t.Errorf("image %s: version label %q, want %q (rebuild it: scripts/image.sh)", img, got, release)
	}
	if got := labels["io.modelcontextprotocol.server.name"]; got != registryName {
		t.Errorf("image %s: io.modelcontextprotocol.server.name %q, want %q", img, got, registryName)
	}
	out, err = exec.Command(docker, "run", "--rm", "--network", "none", img, "version").CombinedOutput()
	if err != nil {
		t.Fatalf("docker run %s version: %v\n%s", img, err, out)
	}
	if f := strings.Fields(string(out)); len(f) < 2 || f[1] != release {
		t.Errorf("the image's ipybox version = %q, want version %s", out, release)
	}
}

// upstreamLast is the last release of upstream's Python package on PyPI
// under the name ipybox (docs/packaging.md, "One version").
const upstreamLast = "0.9.2"

// TestReleaseSucceedsUpstream checks that release sorts above upstream's
// last PyPI release, so that `pip install ipybox` and `uvx ipybox` pick
// ours once it is uploaded, and that the comparison itself is not
// lexical ("0.10.0" > "0.9.2" > "0.1.0").
func TestReleaseSucceedsUpstream(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		a, b string
		want int
	}{
		{"0.10.0", "0.9.2", 1}, {"0.9.2", "0.10.0", -1}, {"0.1.0", "0.9.2", -1},
		{"1.0.0", "0.9.2", 1}, {"0.9.2", "0.9.2", 0}, {"0.9.10", "0.9.2", 1},
	} {
		if got := compareRelease(t, c.a, c.b); got != c.want {
			t.Errorf("compareRelease(%q, %q) = %d; want %d", c.a, c.b, got, c.want)
		}
	}
	if compareRelease(t, release, upstreamLast) <= 0 {
		t.Errorf("release %q does not sort above upstream's last PyPI release %s: pip and uvx would install upstream's package; number it higher (docs/packaging.md)", release, upstreamLast)
	}
}

// compareRelease compares two MAJOR.MINOR.PATCH versions numerically.
func compareRelease(t *testing.T, a, b string) int {
	t.Helper()
	parse := func(v string) [3]int {
		var n [3]int
		if _, err := fmt.Sscanf(v, "%d.%d.%d", &n[0], &n[1], &n[2]); err != nil || fmt.Sprintf("%d.%d.%d", n[0], n[1], n[2]) != v {
			t.Fatalf("version %q is not MAJOR.MINOR.PATCH", v)
		}
		return n
	}
	x, y := parse(a), parse(b)
	for i := range x {
		if x[i] != y[i] {
			if x[i] > y[i] {
				return 1
			}
			return -1
		}
	}
	return 0
}

// TestImageStampsCommit: the image's `ipybox version` said "unknown
// commit" (its build context has no .git for Go to stamp): the Dockerfile
// sets main.commit from COMMIT, and scripts/image.sh passes the commit.
// The binary reports a commit set that way (buildVersion's ldCommit).
func TestImageStampsCommit(t *testing.T) {
	t.Parallel()
	if df := string(readRepoFile(t, "Dockerfile")); !strings.Contains(df, "-X main.commit=${COMMIT}") || !strings.Contains(df, "ARG COMMIT") {
		t.Error("the Dockerfile does not set main.commit from the COMMIT build argument")
	}
	if sh := string(readRepoFile(t, "scripts/image.sh")); !strings.Contains(sh, `--build-arg COMMIT="$commit"`) || !strings.Contains(sh, "git rev-parse --short=12 HEAD") {
		t.Error("scripts/image.sh does not pass the commit as COMMIT")
	}
	if _, rev := buildVersion(nil, "1.0.0", "0123456789ab"); rev != "0123456789ab" {
		t.Errorf("a commit set with -X main.commit is reported as %q", rev)
	}
}

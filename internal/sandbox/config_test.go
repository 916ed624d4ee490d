package sandbox

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestParseConfig(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		json    string
		want    *Config
		wantErr string
	}{
		{name: "empty", json: ``, want: &Config{RootMode: RootMinimal}},
		{name: "empty object", json: `{}`, want: &Config{RootMode: RootMinimal}},
		{
			name: "srt example",
			json: `{
			  "network": {"allowedDomains": ["github.com", "*.github.com"], "deniedDomains": ["malicious.com"],
			              "allowUnixSockets": ["/var/run/docker.sock"], "allowLocalBinding": false},
			  "filesystem": {"denyRead": ["~/.ssh"], "allowWrite": [".", "/tmp"], "denyWrite": [".env"]},
			  "enableWeakerNestedSandbox": false, "allowPty": true
			}`,
			want: &Config{
				RootMode: RootMinimal,
				Filesystem: FilesystemConfig{
					DenyRead: []string{"~/.ssh"}, AllowWrite: []string{".", "/tmp"}, DenyWrite: []string{".env"},
				},
				Network: NetworkConfig{
					AllowedDomains: []string{"github.com", "*.github.com"}, DeniedDomains: []string{"malicious.com"},
				},
				Ignored: []string{"allowPty", "enableWeakerNestedSandbox", "network.allowLocalBinding", "network.allowUnixSockets"},
			},
		},
		{
			name: "extensions",
			json: `{"rootMode": "host", "extraRead": ["/opt/x"], "landlock": true, "blockUnixSockets": true,
			        "filesystem": {"extraRead": ["/opt/y"], "futureKey": 1}}`,
			want: &Config{
				RootMode: RootHost, ExtraRead: []string{"/opt/x", "/opt/y"}, Landlock: true, BlockUnixSockets: true,
				Ignored: []string{"filesystem.futureKey"},
			},
		},
		{name: "null sections", json: `{"network": null, "filesystem": null}`, want: &Config{RootMode: RootMinimal}},
		{name: "not an object", json: `[1]`, wantErr: "want a JSON object"},
		{name: "bad json", json: `{`, wantErr: "want a JSON object"},
		{name: "filesystem not object", json: `{"filesystem": []}`, wantErr: "filesystem: want a JSON object"},
		{name: "denyRead not list", json: `{"filesystem": {"denyRead": "~/.ssh"}}`, wantErr: "filesystem.denyRead: want an array of strings"},
		{name: "empty path", json: `{"filesystem": {"allowWrite": [""]}}`, wantErr: "filesystem.allowWrite[0]: empty"},
		{name: "bad glob", json: `{"filesystem": {"denyRead": ["secrets/[x"]}}`, wantErr: `filesystem.denyRead[0]: path "secrets/[x": bad glob`},
		{name: "tilde user", json: `{"extraRead": ["~bob/x"]}`, wantErr: "extraRead[0]: path \"~bob/x\": ~user"},
		{name: "bad root mode", json: `{"rootMode": "full"}`, wantErr: `rootMode "full"`},
		{name: "root mode type", json: `{"rootMode": 1}`, wantErr: "rootMode: want a string"},
		{name: "landlock type", json: `{"landlock": "yes"}`, wantErr: "landlock: want true or false"},
		{name: "bad allowed domain", json: `{"network": {"allowedDomains": ["https://x.com"]}}`, wantErr: "network.allowedDomains: invalid domain pattern"},
		{name: "any public", json: `{"network": {"allowedDomains": ["*"]}}`, want: &Config{RootMode: RootMinimal, Network: NetworkConfig{AllowedDomains: []string{"*"}}}},
		{name: "deny all", json: `{"network": {"deniedDomains": ["*"]}}`, want: &Config{RootMode: RootMinimal, Network: NetworkConfig{DeniedDomains: []string{"*"}}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseConfig([]byte(tt.json))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("ParseConfig error = %v, want it to contain %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("ParseConfig =\n%+v\nwant\n%+v", got, tt.want)
			}
		})
	}
}

func TestLoadConfigNamesFile(t *testing.T) {
	t.Parallel()
	p := filepath.Join(t.TempDir(), "srt-settings.json")
	if err := os.WriteFile(p, []byte(`{"rootMode": "x"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := LoadConfig(p)
	if err == nil || !strings.Contains(err.Error(), p) {
		t.Fatalf("LoadConfig error = %v, want it to name %s", err, p)
	}
	if _, err := LoadConfig(p + ".missing"); err == nil {
		t.Fatal("LoadConfig of a missing file succeeded")
	}
}

func TestAllowDomains(t *testing.T) {
	t.Parallel()
	c := DefaultConfig()
	if err := c.AllowDomains("pypi.org", "*.pythonhosted.org", "pypi.org"); err != nil {
		t.Fatal(err)
	}
	if want := []string{"pypi.org", "*.pythonhosted.org"}; !reflect.DeepEqual(c.Network.AllowedDomains, want) {
		t.Errorf("AllowedDomains = %q, want %q", c.Network.AllowedDomains, want)
	}
	if err := c.AllowDomains("ok.example.com", "*.com"); err == nil {
		t.Error("AllowDomains accepted *.com")
	}
	if len(c.Network.AllowedDomains) != 2 {
		t.Errorf("a failed AllowDomains added entries: %q", c.Network.AllowedDomains)
	}
}

func TestExpandPath(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in, want, wantErr string
	}{
		{in: "~", want: "/home/u"},
		{in: "~/.ssh", want: "/home/u/.ssh"},
		{in: "~other/x", wantErr: "~user"},
		{in: ".", want: "/ws"},
		{in: "sub/../x", want: "/ws/x"},
		{in: "/etc//passwd", want: "/etc/passwd"},
	}
	for _, tt := range tests {
		got, err := expandPath(tt.in, "/ws", "/home/u")
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("expandPath(%q) error = %v, want %q", tt.in, err, tt.wantErr)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("expandPath(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
		}
	}
	if _, err := expandPath("~/x", "/ws", ""); err == nil {
		t.Error("expandPath with an unknown home succeeded")
	}
}

func TestExpandGlob(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	for _, f := range []string{"a/.env", "a/b/.env", "a/b/c/.env", "a/b/c/key.pem", "x.pem", ".env.local", "link/.env"} {
		p := filepath.Join(root, f)
		if strings.HasPrefix(f, "link/") {
			continue
		}
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	// A symbolic link to a directory: "**" must not descend through it.
	if err := os.Symlink(filepath.Join(root, "a"), filepath.Join(root, "link")); err != nil {
		t.Fatal(err)
	}
	j := func(s ...string) []string {
		for i := range s {
			s[i] = filepath.Join(root, s[i])
		}
		return s
	}
	tests := []struct {
		pattern string
		want    []string
	}{
		{"missing/file", j("missing/file")}, // not a glob: stands for itself
		{"*.pem", j("x.pem")},
		{".env*", j(".env.local")},
		{"a/*/.env", j("a/b/.env")},
		{"**/.env", j("a/.env", "a/b/.env", "a/b/c/.env")},
		{"a/**", j("a", "a/.env", "a/b", "a/b/.env", "a/b/c", "a/b/c/.env", "a/b/c/key.pem")},
		{"**/*.pem", j("a/b/c/key.pem", "x.pem")},
		{"a/**/c/*.pem", j("a/b/c/key.pem")},
		{"nothing/**/x", nil},
	}
	for _, tt := range tests {
		got, err := expandGlob(filepath.Join(root, tt.pattern))
		if err != nil {
			t.Errorf("expandGlob(%q): %v", tt.pattern, err)
			continue
		}
		if !reflect.DeepEqual(got, tt.want) && !(len(got) == 0 && len(tt.want) == 0) {
			t.Errorf("expandGlob(%q) = %q, want %q", tt.pattern, got, tt.want)
		}
	}
	if _, err := expandGlob(filepath.Join(root, "[")); err == nil {
		t.Error("expandGlob accepted a bad pattern")
	}
	got, err := expandAll([]string{"*.pem", "missing", "x.pem"}, root, "", false)
	if err != nil || !reflect.DeepEqual(got, j("x.pem")) {
		t.Errorf("expandAll = %q, %v; want only the existing x.pem once", got, err)
	}
}

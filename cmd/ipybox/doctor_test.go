package main

import (
	"context"
	"errors"
	"os/exec"
	"strings"
	"testing"
)

// TestSandboxCheck: doctor names what the sandbox needs on each system,
// and how to get it.
func TestSandboxCheck(t *testing.T) {
	t.Parallel()
	found := func(name string) (string, error) { return "/usr/bin/" + name, nil }
	missing := func(name string) (string, error) { return "", exec.ErrNotFound }
	works := func(context.Context) error { return nil }
	fails := func(context.Context) error { return errors.New("sandbox unavailable: probe failed") }
	for _, tc := range []struct {
		goos   string
		look   func(string) (string, error)
		probe  func(context.Context) error
		ok     bool
		name   string
		detail string
	}{
		{"linux", missing, works, false, "bwrap", "apt-get install bubblewrap"},
		{"linux", found, works, true, "sandbox", "bwrap at /usr/bin/bwrap"},
		{"linux", found, fails, false, "sandbox", "probe failed; without it"},
		{"darwin", missing, works, false, "sandbox-exec", "ships with macOS"},
		{"darwin", found, works, true, "sandbox", "sandbox-exec at /usr/bin/sandbox-exec"},
		{"darwin", found, fails, false, "sandbox", "probe failed"},
		{"windows", found, works, false, "sandbox", "no sandbox on windows: exec --sandbox fails"},
	} {
		c := sandboxCheck(context.Background(), tc.goos, tc.look, tc.probe)
		if c.ok != tc.ok || c.name != tc.name || !strings.Contains(c.detail, tc.detail) || c.required {
			t.Errorf("%s: %+v, want ok=%v name %q, detail with %q, not required", tc.goos, c, tc.ok, tc.name, tc.detail)
		}
	}
}

// TestDoctorProtectionsWithoutSandbox: where the sandbox cannot run (the
// image, with no bwrap and --no-sandbox), the doctor listed the
// sandbox's protections as ok; now one line says none applies.
func TestDoctorProtectionsWithoutSandbox(t *testing.T) {
	t.Parallel()
	list := func() []string { return []string{"seccomp filter", "MISSING: landlock"} }
	for _, inImage := range []bool{false, true} {
		got := protectionChecks(false, inImage, list)
		if len(got) != 1 || got[0].ok || !strings.Contains(got[0].detail, "none of the sandbox's applies") ||
			inImage != strings.Contains(got[0].detail, "--no-sandbox") {
			t.Errorf("inImage=%v: %+v", inImage, got)
		}
	}
	got := protectionChecks(true, false, list)
	if len(got) != 2 || !got[0].ok || got[1].ok || got[1].detail != "landlock" {
		t.Errorf("with the sandbox: %+v", got)
	}
}

package main

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// TestReadTokenFile: one token is the principal "default"'s; NAME:TOKEN
// lines name several; mistakes are refused with the line that has them.
func TestReadTokenFile(t *testing.T) {
	t.Parallel()
	const a, b = "0123456789abcdef0123", "fedcba9876543210fedc"
	for _, tc := range []struct {
		file string
		want map[string]string
		err  string
	}{
		{a + "\n", map[string]string{"default": a}, ""},
		{"# ci and people\nalice:" + a + "\n\nci-bot: " + b + "\n", map[string]string{"alice": a, "ci-bot": b}, ""},
		{"alice:" + a + "\n", map[string]string{"alice": a}, ""},
		{"short\n", nil, "at least 16"},
		{"alice:" + a + "\nbob:short\n", nil, `token of "bob" is 5 characters`},
		{"alice:" + a + "\n" + b + "\n", nil, "line 2 is not NAME:TOKEN"},
		{"alice:" + a + "\nalice:" + b + "\n", nil, "named twice"},
		{"alice:" + a + "\nbob:" + a + "\n", nil, "the same token"},
		{"al ice:" + a + "\n", nil, "line 1: principal name"},
		{"\n# nothing\n", nil, "holds no token"},
	} {
		p := filepath.Join(t.TempDir(), "tokens")
		os.WriteFile(p, []byte(tc.file), 0o600)
		got, err := readTokenFile(&cliEnv{getenv: func(string) string { return "" }}, p)
		switch {
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%q: error %v, want one with %q", tc.file, err, tc.err)
		case tc.err == "" && (err != nil || !reflect.DeepEqual(got, tc.want)):
			t.Errorf("%q: %v %v, want %v", tc.file, got, err, tc.want)
		}
	}
}

// TestTokenFileOutsideImagePrivate: in the image, a token file outside
// /ipybox is one kernel code reads (it shares the server's uid), and
// then calls the server as its client: ipybox says so at start.
func TestTokenFileOutsideImagePrivate(t *testing.T) {
	p := filepath.Join(t.TempDir(), "token")
	os.WriteFile(p, []byte(strings.Repeat("a", 32)+"\n"), 0o600)
	for _, inImage := range []bool{false, true} {
		var stderr strings.Builder
		env := &cliEnv{stderr: &stderr, getenv: func(k string) string {
			if k == imageEnv && inImage {
				return "1"
			}
			return ""
		}}
		if _, err := readTokenFile(env, p); err != nil {
			t.Fatal(err)
		}
		if got := strings.Contains(stderr.String(), "outside /ipybox, where kernel code in this container can read it"); got != inImage {
			t.Errorf("in the image %v: stderr %q; want the warning %v", inImage, stderr.String(), inImage)
		}
	}
}

package docker

import (
	"strings"
	"testing"
)

// TestReadBuild reads the classic builder's answer: lines split across
// messages are joined, empty ones dropped, and an error message fails the
// build with its text, after the lines before it.
func TestReadBuild(t *testing.T) {
	cases := []struct {
		name, in string
		lines    []string
		err      string
	}{
		{"steps", `{"stream":"Step 1/2 : FROM x\n"}{"stream":" ---\u003e abc\n"}{"aux":{"ID":"sha256:1"}}{"stream":"Step 2/2 : RUN"}{"stream":" true\n\n"}{"stream":"Successfully built 1\n"}`,
			[]string{"Step 1/2 : FROM x", " ---> abc", "Step 2/2 : RUN true", "Successfully built 1"}, ""},
		{"failed", `{"stream":"Step 1/1 : RUN false\n"}{"stream":"partial"}{"errorDetail":{"code":1},"error":"The command '/bin/sh -c false' returned a non-zero code: 1"}`,
			[]string{"Step 1/1 : RUN false", "partial"}, "build failed: The command '/bin/sh -c false' returned a non-zero code: 1"},
		{"cut short", `{"stream":"Step 1/1 : RUN sleep 9\n"}{"stream":"x`,
			[]string{"Step 1/1 : RUN sleep 9"}, "reading the daemon's answer"},
		{"no newline at the end", `{"stream":"last words"}`, []string{"last words"}, ""},
		{"colours", `{"stream":"\u001b[91mE: \u001b[0m\u001b[91mUnable to locate package x\u001b[0m\n"}{"stream":"\u001b[0m\n"}`,
			[]string{"E: Unable to locate package x"}, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var got []string
			err := readBuild(strings.NewReader(c.in), func(l string) { got = append(got, l) })
			if strings.Join(got, "|") != strings.Join(c.lines, "|") {
				t.Errorf("lines %q, want %q", got, c.lines)
			}
			switch {
			case c.err == "" && err != nil:
				t.Errorf("error %v, want none", err)
			case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
				t.Errorf("error %v, want one with %q", err, c.err)
			}
		})
	}
}

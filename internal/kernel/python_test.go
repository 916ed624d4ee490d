package kernel

import (
	"slices"
	"testing"
)

// TestPythonCandidates: each system's discovery order, from a fake PATH
// and file system.
func TestPythonCandidates(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, goos, path string
		files            []string
		py               string
		want             []string
	}{
		{
			name: "linux", goos: "linux", path: "/home/u/.pyenv/shims:/usr/local/bin:/usr/bin",
			files: []string{"/home/u/.pyenv/shims/python3", "/usr/bin/python3"},
			want:  []string{"/home/u/.pyenv/shims/python3", "/usr/bin/python3"},
		},
		{
			name: "linux without python", goos: "linux", path: "/bin",
			want: nil,
		},
		{
			name: "macOS apple silicon from a desktop (no Homebrew on PATH)", goos: "darwin", path: "/usr/bin:/bin",
			files: []string{"/opt/homebrew/bin/python3", "/usr/bin/python3"},
			want:  []string{"/opt/homebrew/bin/python3"}, // /usr/bin/python3 is the installer stub here
		},
		{
			name: "macOS intel with the command line tools", goos: "darwin", path: "/usr/local/bin:/usr/bin",
			files: []string{"/usr/local/bin/python3", "/usr/bin/python3", "/Library/Developer/CommandLineTools/usr/bin/python3"},
			want:  []string{"/usr/local/bin/python3", "/usr/bin/python3"},
		},
		{
			name: "windows", goos: "windows",
			path:  `C:\Users\u\AppData\Local\Microsoft\WindowsApps;C:\Python312\;C:\tools`,
			files: []string{`C:\Users\u\AppData\Local\Microsoft\WindowsApps\python.exe`, `C:\Python312\python.exe`, `C:\Program Files\Python313\python.exe`},
			py:    `C:\Program Files\Python313\python.exe`,
			want:  []string{`C:\Python312\python.exe`, `C:\Program Files\Python313\python.exe`},
		},
		{
			name: "windows, py launcher only", goos: "windows", path: `C:\Windows\system32`,
			files: []string{`C:\Py\python.exe`}, py: `C:\Py\python.exe`,
			want: []string{`C:\Py\python.exe`},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			exists := func(p string) bool { return slices.Contains(tc.files, p) }
			got := pythonCandidates(tc.goos, tc.path, exists, func() string { return tc.py })
			if !slices.Equal(got, tc.want) {
				t.Errorf("got %q\nwant %q", got, tc.want)
			}
		})
	}
}

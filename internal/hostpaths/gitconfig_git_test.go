package hostpaths_test

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/ipybox/ipybox/internal/hostpaths"
	"github.com/ipybox/ipybox/internal/testenv"
)

// gitEntry is one key of a config file as git lists it.
type gitEntry struct {
	key, value string
	hasValue   bool
}

func (e gitEntry) String() string {
	if !e.hasValue {
		return fmt.Sprintf("%q (no value)", e.key)
	}
	return fmt.Sprintf("%q = %q", e.key, e.value)
}

// gitList runs the real git on cfg: git config --file F --list -z
// --no-includes. ok is false when git refuses the file (git then refuses
// to run in a repository with that config, so it runs nothing it names).
func gitList(t *testing.T, git, dir string, cfg []byte) (entries []gitEntry, ok bool) {
	t.Helper()
	f := filepath.Join(dir, "config")
	if err := os.WriteFile(f, cfg, 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(git, "config", "--file", f, "--list", "-z", "--no-includes")
	cmd.Env = []string{"HOME=" + dir, "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null", "LC_ALL=C", "PATH=" + os.Getenv("PATH")}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output() // bound: git reads one small file and exits
	if ee := (*exec.ExitError)(nil); errors.As(err, &ee) {
		return nil, false
	} else if err != nil {
		t.Fatalf("%s config --list: %v\n%s", git, err, stderr.Bytes())
	}
	for _, rec := range strings.SplitAfter(string(out), "\x00") {
		if rec == "" {
			continue
		}
		rec = strings.TrimSuffix(rec, "\x00")
		k, v, has := strings.Cut(rec, "\n")
		entries = append(entries, gitEntry{k, v, has})
	}
	return entries, true
}

// configSeeds are configs in git's trickier syntax: quotes, escapes,
// continuation lines, comments, subsections, case, the legacy
// [section.sub] form, a byte order mark, CRLF ends, several sections on a
// line, keys at the end of the file without a newline.
var configSeeds = []string{
	"[core]\n\thooksPath = x\n",
	"[include]\npath = \"a\\\"b\"\n",
	"[CORE]\n\tHooksPath = /evil\n",
	"[core]\n# a comment \\\n\thooksPath = /evil\n",
	"[core]\n; a comment \\\nhooksPath = /evil\n",
	"[core]\n\thooksPath = /ev\\\nil\n",
	"[core]\n\thooksPath = \"/ev\\\nil\"\n",
	"[core]\n\thooksPath = /a\\\\\n\tfsmonitor = /b\n",
	"[core]\n\thooksPath = /a\\\\\\\nb\n",
	"[core][include]path=/evil\n",
	"[core] hooksPath = /evil\n",
	"[core]hooksPath=/evil ; c\n[include] path = /x # c\n",
	"\xef\xbb\xbf[core]\n\thooksPath = /evil\n",
	"\xef\xbb[core]\n\thooksPath = /evil\n",
	"[core]\r\n\thooksPath = /evil\r\n",
	"[core]\r\n\thooksPath = /ev\\\r\nil\r\n",
	"[core]\n\thooksPath = /evil\r",
	"[core]\rhooksPath = /evil\n",
	"[core]\n\thooksPath = /evil",
	"[core]\n\thooksPath",
	"[core]\n\thooksPath\n\tfsmonitor\n",
	"[core.sub]\n\thooksPath = /x\n",
	"[filter.LFS]\n\tclean = ./clean.sh\n",
	"[filter \"LFS\"]\n\tclean = ./clean.sh\n",
	"[filter \"a\\\"b\\\\c\\d\"]\n\tsmudge = ./s\n",
	"[filter \"a.b\"]\n\tsmudge = ./s\n",
	"[includeIf \"gitdir:~/w/\"]\n\tpath = ~/w.cfg\n",
	"[includeif \"onbranch:main\"]\n\tpath = ../x\n",
	"[alias]\n\tx = \"!./run.sh\"\n\ty = !'./q q.sh' a\n",
	"[alias]\n\tx = ! ./run.sh\n",
	"[core]\n\tfsmonitor = yes\n\tfsmonitor = ./fsm\n",
	"[core]\n\tattributesFile = \"  /sp  \"\n",
	"[core]\n\tattributesFile =   /sp   # t\n",
	"[core]\n\thooksPath = /a\\tb\\n\n",
	"[core]\n\thooksPath = /a\\x\n",
	"[core]\n\thooksPath = \"/a\n",
	"[core]\n\thooks-path = /a\n\t2x = 1\n",
	"[core]\n\thooks_path = /a\n",
	"[core]\n\thooksPath = /a\x00b\n",
	"[core\n\thooksPath = /a\n",
	"[core \"\"]\n\thooksPath = /a\n",
	"[core \"x\" ]\n\thooksPath = /a\n",
	"[ core]\n\thooksPath = /a\n",
	"[co re]\n\thooksPath = /a\n",
	"[]\n\thooksPath = /a\n",
	"hooksPath = /a\n",
	"  [core]  \n  hooksPath=/a\n",
	"[core]\n\thooksPath\t=\t/a\t\n",
	"[core]\n\thooksPath = /a\v\n",
	"[core]\n\thooksPath = \xc2\xa0/a\n",
	"[core]\n\thooksPath = /a;b\n\tfsmonitor = \"/c;d\"\n",
	"[core]\n\thooksPath = a\"b\"c\n",
	"[diff \"x\"]\n\ttextconv = tools/t\n\tcommand = /c\n[diff]\n\texternal = ./ext\n",
	"[credential \"https://h\"]\n\thelper = /h\n[credential]\n\thelper = ./c\n",
	"[core]\n\tsshCommand = \"/s\" -i k\n\teditor = '~/ed'\n\tpager = less\n",
	"[remote \"o\"]\n\tuploadpack = ./up\n\treceivepack = /rp\n",
}

// FuzzConfigPathsGit checks the config reader against the real git: every
// key git reads from a file, the reader reads with the same value, so
// that ConfigPaths names every path git would read or run. A key git
// reads and the reader misses, or reads with another value, is an escape
// (a hooksPath, include.path or alias nobody protects). When the reader
// gives up (incomplete), callers protect the whole tree, so only a
// complete reading is compared; when git refuses the file, git runs
// nothing from it, so nothing is compared.
func FuzzConfigPathsGit(f *testing.F) {
	git := testenv.NeedsTool(f, "git")
	for _, s := range configSeeds {
		f.Add([]byte(s))
	}
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, cfg []byte) {
		want, gitOK := gitList(t, git, dir, cfg)
		entries, complete := hostpaths.ConfigEntries(cfg)
		if !complete {
			return
		}
		var got []gitEntry
		for _, e := range entries {
			k, v, has := e.Parts()
			got = append(got, gitEntry{k, v, has})
		}
		if !gitOK {
			t.Fatalf("config %q: git refuses it, the reader reads it whole:\n%v", cfg, got)
		}
		if !slices.Equal(got, want) {
			t.Fatalf("config %q:\ngit reads %v\nthe reader %v", cfg, want, got)
		}
		// And what is named follows from git's reading.
		var wantNamed []hostpaths.Named
		for _, e := range want {
			if e.hasValue {
				wantNamed = append(wantNamed, hostpaths.NamedBy(e.key, e.value, "/ws/.git", "/ws", "/home/u")...)
			}
		}
		named, _ := hostpaths.ConfigPaths(cfg, "/ws/.git", "/ws", "/home/u")
		if !slices.Equal(named, wantNamed) {
			t.Fatalf("config %q: ConfigPaths names %v, git's keys name %v", cfg, named, wantNamed)
		}
	})
}

// TestConfigSeedsRead keeps the seeds meaningful: most of them are read
// whole, so the comparison above is not vacuous.
func TestConfigSeedsRead(t *testing.T) {
	n := 0
	for _, s := range configSeeds {
		if _, complete := hostpaths.ConfigEntries([]byte(s)); complete {
			n++
		}
	}
	if n < len(configSeeds)*2/3 {
		t.Errorf("only %d of %d seeds are read whole", n, len(configSeeds))
	}
}

package container

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
)

func TestCheckBind(t *testing.T) {
	for _, tc := range []struct {
		b    Bind
		want string // "" for valid
	}{
		{Bind{"/data", "data"}, ""},
		{Bind{"/data", "a/b"}, ""},
		{Bind{"/data", "data/"}, ""},
		{Bind{"data", "data"}, "must be absolute"},
		{Bind{"/data", "/abs"}, "must be relative"},
		{Bind{"/data", ""}, "must be relative"},
		{Bind{"/data", ".."}, "stay under /app/"},
		{Bind{"/data", "a/../../x"}, "stay under /app/"},
		{Bind{"/data", "a//b"}, "must be clean"},
		{Bind{"/data", "."}, "must be clean"},
		{Bind{"/data", "a:b"}, "must not contain"},
		{Bind{"/data", "workspace"}, "is the workspace"},
		{Bind{"/data", "workspace/x"}, "is the workspace"},
	} {
		err := CheckBind(tc.b)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%+v: %v", tc.b, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%+v: %v, want %q", tc.b, err, tc.want)
		}
	}
}

func TestEnvMapsPaths(t *testing.T) {
	l := &Launcher{cfg: Config{Workspace: "/home/u/proj", Env: []string{"A=1"}}}
	got := l.env([]string{"PATH=/home/u/.pyenv/bin:/usr/bin", "HOME=/home/u", "PYTHONPATH=/run/x/py:/home/u/proj", "X=/home/u/project", "Y=/home/u/proj/sub"})
	want := []string{"A=1", "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/tmp",
		"PYTHONPATH=/run/x/py:/app/workspace", "X=/home/u/project", "Y=/app/workspace/sub"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("env:\n got %q\nwant %q", got, want)
	}
}

func TestOrphaned(t *testing.T) {
	host, _ := os.Hostname()
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	dead := cmd.Process.Pid
	me := ownerLabel(os.Getpid())
	for _, tc := range []struct {
		owner string
		want  bool
	}{
		{me, false},
		{fmt.Sprintf("%s/%d/%s", host, os.Getpid(), "1"), true}, // pid reused: another start time
		{fmt.Sprintf("%s/%d/x", host, dead), true},
		{fmt.Sprintf("otherhost/%d/x", dead), false}, // not ours to judge
		{"garbage", false},
		{"", false},
	} {
		if got := Orphaned(tc.owner, host); got != tc.want {
			t.Errorf("Orphaned(%q) = %v, want %v", tc.owner, got, tc.want)
		}
	}
}

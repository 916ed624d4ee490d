package main

import (
	"runtime/debug"
	"testing"
)

func TestBuildVersion(t *testing.T) {
	t.Parallel()
	vcs := func(rev, modified string) []debug.BuildSetting {
		return []debug.BuildSetting{{Key: "vcs", Value: "git"}, {Key: "vcs.revision", Value: rev}, {Key: "vcs.modified", Value: modified}}
	}
	const rev = "6946d5f5846afdfb59d141633273388c77c41c59"
	tests := []struct {
		name       string
		bi         *debug.BuildInfo
		ldVer      string
		ldCommit   string
		ver, short string
	}{
		{"no build info", nil, "", "", "devel", ""},
		{"no build info, ldflags", nil, "v1.2.3", "abc", "v1.2.3", "abc"},
		{"go build outside git", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}}, "", "", "devel", ""},
		{"go build in a clean clone", &debug.BuildInfo{Main: debug.Module{Version: "v0.0.0-20261123104300-6946d5f5846a"}, Settings: vcs(rev, "false")},
			"", "", "v0.0.0-20261123104300-6946d5f5846a", "6946d5f5846a"},
		{"go build with changes", &debug.BuildInfo{Main: debug.Module{Version: "v0.0.0-20261123104300-6946d5f5846a+dirty"}, Settings: vcs(rev, "true")},
			"", "", "v0.0.0-20261123104300-6946d5f5846a", "6946d5f5846a+dirty"},
		{"go install @latest, untagged", &debug.BuildInfo{Main: debug.Module{Version: "v0.0.0-20261123104300-6946d5f5846a"}},
			"", "", "v0.0.0-20261123104300-6946d5f5846a", "6946d5f5846a"},
		{"go install @latest, after a tag", &debug.BuildInfo{Main: debug.Module{Version: "v0.1.1-0.20261123104300-6946d5f5846a"}},
			"", "", "v0.1.1-0.20261123104300-6946d5f5846a", "6946d5f5846a"},
		{"go install of a tag", &debug.BuildInfo{Main: debug.Module{Version: "v0.1.0"}}, "", "", "v0.1.0", ""},
		{"install.sh in a worktree", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}}, "", "6946d5f5846a", "devel", "6946d5f5846a"},
		{"stamped VCS wins over ldflags", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: vcs(rev, "false")}, "v9", "ffffffffffff", "v9", "6946d5f5846a"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ver, c := buildVersion(tt.bi, tt.ldVer, tt.ldCommit)
			if ver != tt.ver || c != tt.short {
				t.Errorf("buildVersion = %q, %q; want %q, %q", ver, c, tt.ver, tt.short)
			}
		})
	}
}

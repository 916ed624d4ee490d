package main

import (
	"context"
	"fmt"
	"regexp"
	"runtime"
	"runtime/debug"
	"strings"
)

// release is the version of this source tree. The builds that ship
// (scripts/wheels.sh's wheels, scripts/image.sh's image) stamp it as
// version; the Python package, the plugins, server.json and the image's
// label carry the same string, and TestVersionsAgree holds them to it.
// A release changes this line and those files together.
const release = "0.10.0"

// version and commit may be set at build time with -ldflags
// "-X main.version=1.2.3 -X main.commit=abcdef123456" (scripts/wheels.sh
// and scripts/image.sh set both to release and the commit; scripts/install.sh
// sets commit: Go stamps no VCS information in a git worktree, nor where
// GOFLAGS has -buildvcs=false). Otherwise the module version (or "devel")
// and the commit Go stamped are reported.
var version, commit = "", ""

// pseudoCommit matches the commit at the end of a Go pseudo-version
// (v0.0.0-20261123101500-abcdef123456, v1.2.4-0.2026…-abcdef123456).
var pseudoCommit = regexp.MustCompile(`[-.]\d{14}-([0-9a-f]{12})(\+incompatible)?$`)

// buildVersion says what build this is: the version, and the commit it was
// built from. A build in a git work tree (go build, scripts/install.sh)
// has the commit in its VCS settings, with "+dirty" for uncommitted
// changes; `go install …@latest` of an untagged module has a
// pseudo-version, which ends in the commit. A tagged release names its
// commit through the tag, and has no commit to print.
func buildVersion(bi *debug.BuildInfo, ldVersion, ldCommit string) (ver, commit string) {
	ver = ldVersion
	if bi == nil {
		if ver == "" {
			ver = "devel"
		}
		return ver, ldCommit
	}
	if ver == "" {
		ver = "devel"
		if v := bi.Main.Version; v != "" && v != "(devel)" {
			ver = v
		}
	}
	var rev string
	var dirty bool
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	switch {
	case rev == "" && ldCommit != "":
		commit = ldCommit
	case rev != "":
		if len(rev) > 12 {
			rev = rev[:12]
		}
		commit = rev
		if dirty {
			commit += "+dirty"
		}
	default:
		if m := pseudoCommit.FindStringSubmatch(bi.Main.Version); m != nil {
			commit = m[1]
		}
	}
	// A dev build's module version may itself be a pseudo-version carrying
	// "+dirty" (Go 1.24 stamps one from git); the commit is said apart.
	ver = strings.TrimSuffix(ver, "+dirty")
	return ver, commit
}

func versionString() string {
	bi, _ := debug.ReadBuildInfo()
	ver, rev := buildVersion(bi, version, commit)
	if rev == "" {
		rev = "unknown commit"
	} else {
		rev = "commit " + rev
	}
	return fmt.Sprintf("ipybox %s (%s, %s %s/%s)", ver, rev, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}

func versionCommand() *command {
	return &command{name: "version", summary: "print the version", run: func(ctx context.Context, env *cliEnv, args []string) int {
		fs := newFlagSet(env, "version", "Usage: ipybox version\n\nPrints ipybox's version and the commit it was built from.")
		if done, code := parseFlags(fs, env, args); done {
			return code
		}
		fmt.Fprintln(env.stdout, versionString())
		return exitOK
	}}
}

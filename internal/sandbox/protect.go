package sandbox

import (
	"os"
	"path/filepath"
	"strings"

	"github.com/ipybox/ipybox/internal/wsguard"
)

// The workspace is writable inside the sandbox, and it is also where the
// host's own programs look for files they read and then act on (git runs
// .git/hooks, Claude Code the hooks in .claude, direnv .envrc...). The
// one list of those paths is internal/hostpaths; internal/wsguard computes
// a start's protection from it, and the guard in the sandbox's init
// refuses every change to such a path, at any depth, whether or not it
// exists. Secrets (.env, .env.*, files that server configs name) are also
// masked.

// protection computes the workspace's protection for one start, and
// records what it was (see StartedFingerprint).
func (s *Sandbox) protection() (*wsguard.Protection, error) {
	p, err := wsguard.Protect(wsguard.Input{Workspace: s.workspace, Home: s.home, Secrets: s.secrets, Log: s.log})
	if err == nil {
		s.fpMu.Lock()
		s.startedFP = p.Fingerprint()
		s.fpMu.Unlock()
	}
	return p, err
}

// StartedFingerprint identifies the workspace protection the last process
// started in this sandbox got (wsguard.Protection.Fingerprint): what it
// hides and protects. A process started under another protection than a
// start now would get (a pool kernel started before a server that names
// a secret file was registered) must not be handed out. "" before the
// first start.
func (s *Sandbox) StartedFingerprint() string {
	s.fpMu.Lock()
	defer s.fpMu.Unlock()
	return s.startedFP
}

// homeDotfiles lists the dot files and directories of the home directory,
// which the host root mode masks: ~/.ssh, ~/.aws, ~/.netrc, ~/.config and
// the like hold credentials, and a read-only view would still show them.
// The workspace's own .ipybox, when the workspace is the home, stays.
func (s *Sandbox) homeDotfiles() []string {
	if s.home == "" {
		return nil
	}
	ents, err := os.ReadDir(s.home)
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range ents {
		if !strings.HasPrefix(e.Name(), ".") {
			continue
		}
		if s.workspace == s.home && e.Name() == ".ipybox" {
			continue
		}
		out = append(out, filepath.Join(s.home, e.Name()))
	}
	return out
}

// Protections lists, for ipybox doctor, what protects the host from
// kernel code in this sandbox on this host.
func Protections() []string {
	return protections()
}

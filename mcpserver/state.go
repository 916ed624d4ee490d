package mcpserver

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/ipybox/ipybox/internal/flock"
	"github.com/ipybox/ipybox/internal/gateway"
	"github.com/ipybox/ipybox/internal/hostproc"
	"github.com/ipybox/ipybox/internal/policy"
	"github.com/ipybox/ipybox/internal/safefs"
	"github.com/ipybox/ipybox/internal/trusted"
)

// The state folder keeps the sessions of create_session beyond the
// process: one file per session, named by its handle's SHA-256 (never the
// handle), holding its principal, where its folders are (its packages and
// its snapshot, in the workspace's .ipybox), and, for a gateway session,
// its kernel's id. A server that starts on the same state folder accepts
// the old handles: the first call on one restores its session.
//
// A session that holds a kernel (a local one: the sandbox, a container, or
// none) also holds an exclusive lock on its lock file, so that two
// processes that share a workspace never run it at once; the lock goes
// with the process, however it ends. Gateway sessions take none: several
// front ends may serve one (see docs/scale.md).

// recordVersion is the format of a record.
const recordVersion = 1

// maxRecord bounds a record file: the host reads what kernel code could
// have written, where the state folder is within its reach (no sandbox).
const maxRecord = 64 << 10

// maxRecords bounds how many records a scan of the state folder reads.
const maxRecords = 100_000

// record is a session of create_session as the state folder keeps it.
type record struct {
	V         int       `json:"v"`
	Principal string    `json:"principal"`
	Created   time.Time `json:"created"`
	Used      time.Time `json:"used"`
	// Packages and Snapshot are the session's folders' names, below
	// .ipybox/packages and .ipybox/snapshots.
	Packages string `json:"packages,omitempty"`
	Snapshot string `json:"snapshot,omitempty"`
	// Kernel is the id of its gateway kernel, and Gateway that gateway's
	// URL.
	Kernel  string `json:"kernel,omitempty"`
	Gateway string `json:"gateway,omitempty"`
	// Frontend is the process that last pointed the gateway kernel's tool
	// calls at itself.
	Frontend string `json:"frontend,omitempty"`
	// Asleep says why the session holds no kernel, when it hibernated;
	// Saved is when its snapshot was saved.
	Asleep string    `json:"asleep,omitempty"`
	Saved  time.Time `json:"saved,omitzero"`
	// Lost says why its last hibernation saved nothing.
	Lost string `json:"lost,omitempty"`
	// Confinement is how the kernels that wrote its folders were
	// confined (confinement.go): none, sandbox/<digest> or
	// container/<digest>; empty for a gateway session, or from an
	// ipybox before it was recorded.
	Confinement string `json:"confinement,omitempty"`
}

// folderName reports whether s can name a session's folder: what
// rand.Text makes, and nothing that could leave .ipybox/packages.
func folderName(s string) bool {
	if len(s) != 26 {
		return false
	}
	for _, r := range s {
		if !(r >= 'A' && r <= 'Z' || r >= '2' && r <= '7') {
			return false
		}
	}
	return true
}

// newFolderName names a new folder of a session.
func newFolderName() string { return rand.Text() }

// check refuses a record that is not one this server would write.
func (r *record) check() error {
	switch {
	case r.V != recordVersion:
		return fmt.Errorf("version %d", r.V)
	case r.Principal != localPrincipal && ValidPrincipalName(r.Principal) != nil:
		return errors.New("bad principal")
	case r.Packages != "" && !folderName(r.Packages), r.Snapshot != "" && !folderName(r.Snapshot):
		return errors.New("bad folder name")
	case r.Kernel != "" && !gateway.ValidID(r.Kernel):
		return errors.New("bad kernel id")
	case len(r.Asleep) > 200, len(r.Gateway) > 2000, len(r.Frontend) > 64, len(r.Lost) > 4000, len(r.Confinement) > 64:
		return errors.New("field too long")
	}
	return nil
}

// stateDir is the state folder.
type stateDir struct {
	dir string
}

// keyName is a record's file name, without its extension.
func keyName(k [32]byte) string { return hex.EncodeToString(k[:]) }

// read returns the record of key, or nil when there is none. A record
// that does not decode, or is not one this server writes, is an error.
func (d *stateDir) read(key [32]byte) (*record, error) {
	b, err := safefs.ReadFile(d.dir, keyName(key)+".json", maxRecord)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var r record
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		return nil, fmt.Errorf("session record %s: %w", keyName(key)[:8], err)
	}
	if err := r.check(); err != nil {
		return nil, fmt.Errorf("session record %s: %w", keyName(key)[:8], err)
	}
	return &r, nil
}

// write replaces the record of key: written beside its name and renamed,
// so that a reader sees the old record or the new one, whole.
func (d *stateDir) write(key [32]byte, r *record) error {
	r.V = recordVersion
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	name := keyName(key)
	tmp := name + "." + newFolderName() + ".tmp"
	if err := safefs.WriteFile(d.dir, tmp, b, 0o600); err != nil {
		return err
	}
	if err := safefs.Rename(d.dir, tmp, name+".json"); err != nil {
		safefs.Remove(d.dir, tmp)
		return err
	}
	return nil
}

// remove forgets key's record and its lock file.
func (d *stateDir) remove(key [32]byte) {
	safefs.Remove(d.dir, keyName(key)+".json")
	safefs.Remove(d.dir, keyName(key)+".lock")
}

// keyed is a record and its key.
type keyed struct {
	key [32]byte
	rec *record
}

// list reads every record of the folder (at most maxRecords). Records
// that cannot be read are skipped.
func (d *stateDir) list() []keyed {
	ents, err := os.ReadDir(d.dir)
	if err != nil {
		return nil
	}
	var out []keyed
	for _, e := range ents {
		name, ok := strings.CutSuffix(e.Name(), ".json")
		if !ok || len(name) != 64 || !e.Type().IsRegular() {
			continue
		}
		var key [32]byte
		if n, err := hex.Decode(key[:], []byte(name)); err != nil || n != 32 {
			continue
		}
		if r, err := d.read(key); err == nil && r != nil {
			out = append(out, keyed{key, r})
		}
		if len(out) >= maxRecords {
			break
		}
	}
	return out
}

// lockWait bounds how long waking a session waits for another process
// that holds it (one that is saving it, say).
const lockWait = 5 * time.Second

// errHeldElsewhere is the answer to a call on a session that another
// process on this workspace runs now.
var errHeldElsewhere = errors.New("this session is running in another ipybox mcp process that shares this workspace (or its state folder); call that server, or wait until the session hibernates there (--hibernate-after) and call again")

// lock takes key's lock, waiting at most wait (or until ctx ends) while
// another process holds it; errHeldElsewhere when it still does. Closing
// the file releases it.
func (d *stateDir) lock(ctx context.Context, key [32]byte, wait time.Duration) (*os.File, error) {
	f, err := safefs.OpenFile(d.dir, keyName(key)+".lock", os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	if err := flock.Lock(ctx, f, true, wait); err != nil {
		f.Close()
		if errors.Is(err, flock.ErrHeld) {
			return nil, errHeldElsewhere
		}
		return nil, err
	}
	return f, nil
}

// openStateDir makes the state folder: dir, or <workspace>/.ipybox/sessions
// when dir is empty (made without following a link).
func openStateDir(workspace, dir string) (*stateDir, error) {
	if dir == "" {
		if err := safefs.MkdirAll(workspace, filepath.Join(".ipybox", "sessions"), 0o700); err != nil {
			return nil, fmt.Errorf("state folder: %w", err)
		}
		return &stateDir{dir: filepath.Join(workspace, ".ipybox", "sessions")}, nil
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("Options.Durability.StateDir: %w", err)
	}
	// Kernels write the workspace: a state folder in it, but for
	// .ipybox/sessions, which every sandbox and container hides, would let
	// their code forge records. (Other folders of .ipybox are bound
	// writable into kernels: a session's packages and snapshots.) Links
	// are resolved first, as far as the path exists.
	sessions := filepath.Join(workspace, ".ipybox", "sessions")
	if real := policy.RealPath(abs); under(real, workspace) && !under(real, sessions) {
		return nil, fmt.Errorf("Options.Durability.StateDir %s is in the workspace, where kernel code can write; choose a folder outside it, or leave it empty for .ipybox/sessions", abs)
	}
	// In the image, kernels run unsandboxed: a state folder outside the
	// workspace is theirs too unless it is in the server's private folder.
	// (The default, .ipybox/sessions, is as open to them as the workspace.)
	if err := hostproc.OutsideImagePrivate("Options.Durability.StateDir", abs); err != nil && !under(policy.RealPath(abs), sessions) {
		return nil, err
	}
	if err := os.MkdirAll(abs, 0o700); err != nil {
		return nil, fmt.Errorf("Options.Durability.StateDir: %w", err)
	}
	// Records name folders that sessions restore from: the folder must be
	// this user's alone (internal/trusted).
	if _, err := trusted.Check("Options.Durability.StateDir", abs, false); err != nil {
		return nil, err
	}
	if real, err := filepath.EvalSymlinks(abs); err == nil {
		abs = real
	}
	return &stateDir{dir: abs}, nil
}

// under reports whether p is dir or below it.
func under(p, dir string) bool {
	rel, err := filepath.Rel(dir, p)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator)) && !filepath.IsAbs(rel)
}

package sandbox

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"time"

	"github.com/ipybox/ipybox/internal/flock"
)

// Placeholders are shared between processes too: two ipybox processes on
// one workspace (two agent sessions in one project) mount the same
// placeholders, and one that removed them at its exit would lift the
// other's protection (unlinking a mount point detaches the mounts on it in
// every namespace), so that kernel code there could write .mcp.json,
// .vscode or .git. Each process that has a sandbox on a workspace holds a
// shared flock on the workspace's holders file, in the user's cache
// folder; the process that releases last takes it exclusively and only
// then removes the placeholders. The journal beside it lists every
// placeholder made, so that those of a process that was killed are removed
// by the next one's last release. A killed process's lock goes with it.

// wsLockWait bounds the wait for another process that is removing the
// workspace's placeholders (it holds the lock exclusively for that only).
const wsLockWait = 10 * time.Second

// wsLockDir is where the holders and journal files live; a var so that
// tests can point it elsewhere.
var wsLockDir = func() (string, error) {
	d, err := os.UserCacheDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(d, "ipybox", "workspaces"), nil
}

// wsFiles returns the holders and journal paths of workspace ws.
func wsFiles(ws string) (holders, journal string, err error) {
	dir, err := wsLockDir()
	if err != nil {
		return "", "", err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", "", err
	}
	sum := sha256.Sum256([]byte(ws))
	base := filepath.Join(dir, hex.EncodeToString(sum[:16]))
	return base + ".holders", base + ".journal", nil
}

// openLock opens (creating) a lock file without following a link.
func openLock(path string) (*os.File, error) {
	return os.OpenFile(path, os.O_RDWR|os.O_CREATE|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0o600)
}

// flockWait takes a lock on f, exclusive or shared, waiting up to
// wsLockWait.
func flockWait(f *os.File, exclusive bool) error {
	return flock.Lock(context.Background(), f, exclusive, wsLockWait)
}

// holdWorkspace takes the shared hold of ws for this process.
func holdWorkspace(ws string) (*os.File, error) {
	holders, _, err := wsFiles(ws)
	if err != nil {
		return nil, err
	}
	f, err := openLock(holders)
	if err != nil {
		return nil, err
	}
	if err := flockWait(f, false); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// journalAdd records a placeholder made in ws.
func journalAdd(ws string, p placeholderFile) error {
	_, journal, err := wsFiles(ws)
	if err != nil {
		return err
	}
	f, err := openLock(journal)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := flockWait(f, true); err != nil {
		return err
	}
	line, _ := json.Marshal(journalEntry{p.name, p.dir, p.dev, p.ino})
	if _, err := f.Seek(0, 2); err != nil {
		return err
	}
	_, err = f.Write(append(line, '\n'))
	return err
}

// isPlaceholderName reports whether name is one ipybox may make a
// placeholder for at the workspace's root.
func isPlaceholderName(name string) bool {
	return name == ".env" || slices.Contains(protectedDirs, name) ||
		slices.Contains(protectedFiles, name) || slices.Contains(shellStartupFiles, name)
}

type journalEntry struct {
	Name string `json:"name"`
	Dir  bool   `json:"dir"`
	Dev  uint64 `json:"dev"`
	Ino  uint64 `json:"ino"`
}

// releaseWorkspace drops this process's hold of ws. When no other process
// holds it, it returns the journal's placeholders (removed from the
// journal) and a function that ends the exclusive hold, to call after
// they are removed; otherwise last is false and nothing may be removed.
func releaseWorkspace(ws string, hold *os.File) (last bool, made []placeholderFile, done func()) {
	hold.Close() // drops the shared lock
	holders, journal, err := wsFiles(ws)
	if err != nil {
		return false, nil, nil
	}
	f, err := openLock(holders)
	if err != nil {
		return false, nil, nil
	}
	if syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) != nil {
		f.Close() // another process holds the workspace: it removes them
		return false, nil, nil
	}
	j, err := openLock(journal)
	if err == nil {
		if flockWait(j, true) == nil {
			sc := bufio.NewScanner(j)
			for sc.Scan() {
				var e journalEntry
				// Only the names ipybox makes placeholders for: the
				// journal is in the user's cache folder, which a sandbox
				// with a "host" root may be able to write.
				if json.Unmarshal(sc.Bytes(), &e) == nil && isPlaceholderName(e.Name) {
					made = append(made, placeholderFile{name: e.Name, dir: e.Dir, dev: e.Dev, ino: e.Ino})
				}
			}
			j.Truncate(0)
		}
		j.Close()
	}
	return true, made, func() { f.Close() }
}

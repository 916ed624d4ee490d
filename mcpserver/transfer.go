package mcpserver

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"

	"github.com/ipybox/ipybox/internal/trusted"
)

// transferDir is the tenant's own folder for upload_file and download_file
// outside its workspace folder, with several principals (and no
// --allowed-dir): <temp>/ipybox-transfer-<uid>/<principal>, 0700. The
// system's temporary folder itself is shared: what alice downloaded there,
// bob uploaded into his folder, and what bob left there under a name alice
// used, she uploaded. The folder above, in a folder that others can write
// (/tmp), is checked as state ipybox trusts (internal/trusted): another
// local user who made it first, or made it writable to others, gets it
// refused, not used.
func (t *tenant) transferDir() (string, error) {
	root := filepath.Join(os.TempDir(), "ipybox-transfer-"+strconv.Itoa(os.Geteuid()))
	dir := filepath.Join(root, t.principal)
	for _, d := range []string{root, dir} {
		if err := os.Mkdir(d, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
			return "", fmt.Errorf("the transfer folder %s: %w", d, err)
		}
	}
	if _, err := trusted.Check("the transfer folder", dir, false); err != nil {
		return "", err
	}
	if fi, err := os.Lstat(dir); err != nil || !fi.IsDir() || fi.Mode().Perm()&0o077 != 0 {
		return "", fmt.Errorf("the transfer folder %s is not a folder of mode 0700 (%v); remove it, and ipybox makes it again", dir, err)
	}
	return realDir(dir)
}

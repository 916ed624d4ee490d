package testenv

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// UV returns the uv binary that scripts/setup.sh installs from PyPI into
// a venv of its own (scripts/pyvenv.sh uv, pinned and hashed): $IPYBOX_UV
// if set, else bin/uv of that venv in $IPYBOX_CACHE_DIR (default the
// user's cache folder's ipybox/). uvx is beside it. It skips locally and
// fails in CI when uv is missing.
func UV(t testing.TB) string {
	t.Helper()
	uv := os.Getenv("IPYBOX_UV")
	if uv == "" {
		cache := os.Getenv("IPYBOX_CACHE_DIR")
		if cache == "" {
			if c, err := os.UserCacheDir(); err == nil {
				cache = filepath.Join(c, "ipybox")
			}
		}
		uv = filepath.Join(cache, "venvs", "uv", "bin", "uv")
	}
	if err := exec.Command(uv, "--version").Run(); err != nil {
		Missing(t, "uv from PyPI at %s (%v); run scripts/setup.sh (scripts/pyvenv.sh uv), or set IPYBOX_UV", uv, err)
	}
	return uv
}

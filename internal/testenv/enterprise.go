package testenv

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
)

// EnterpriseGatewayPython returns the interpreter of the venv that
// scripts/setup.sh makes for Jupyter Enterprise Gateway 3.3.0 from PyPI
// (scripts/pyvenv.sh eg, pinned and hashed): $IPYBOX_EG_PYTHON if set,
// else bin/python of that venv in $IPYBOX_CACHE_DIR (default the user's
// cache folder's ipybox/). It skips locally and fails in CI when it is
// missing.
func EnterpriseGatewayPython(t testing.TB) string {
	t.Helper()
	py := os.Getenv("IPYBOX_EG_PYTHON")
	if py == "" {
		py = filepath.Join(venvRoot(), "eg", "bin", "python")
	}
	if err := exec.Command(py, "-c", "import enterprise_gateway").Run(); err != nil {
		Missing(t, "Jupyter Enterprise Gateway at %s (%v); run scripts/setup.sh (scripts/pyvenv.sh eg), or set IPYBOX_EG_PYTHON", py, err)
	}
	return py
}

// venvRoot is the folder of scripts/pyvenv.sh's venvs.
func venvRoot() string {
	cache := os.Getenv("IPYBOX_CACHE_DIR")
	if cache == "" {
		if c, err := os.UserCacheDir(); err == nil {
			cache = filepath.Join(c, "ipybox")
		}
	}
	return filepath.Join(cache, "venvs")
}

// EnterpriseGateway starts Jupyter Enterprise Gateway 3.3.0 on 127.0.0.1,
// a free port and a random token, and stops it (and its kernels) when t
// ends. Its one kernelspec, python3, runs the interpreter the kernel
// discovery finds (the kernel stack under test: Debian's, or PyPI's with
// IPYBOX_PYTHON) through EG's local process proxy, the one that runs
// kernels on the gateway's own host; on Kubernetes the
// KubernetesProcessProxy starts the same kernel in a pod (docs/scale.md).
func EnterpriseGateway(t testing.TB) *Jupyter {
	t.Helper()
	kernelPy := NeedsPython(t)
	egPy := EnterpriseGatewayPython(t)
	var tb [16]byte
	rand.Read(tb[:])
	j := &Jupyter{Token: hex.EncodeToString(tb[:]), Dir: t.TempDir(), Log: &Buffer{}}
	port, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	j.URL = "http://127.0.0.1:" + strconv.Itoa(port)
	state := t.TempDir()
	spec := map[string]any{
		"argv":         []string{kernelPy, "-m", "ipykernel_launcher", "-f", "{connection_file}"},
		"display_name": "Python 3 (local process proxy)",
		"language":     "python",
		"metadata": map[string]any{"process_proxy": map[string]any{
			"class_name": "enterprise_gateway.services.processproxies.processproxy.LocalProcessProxy",
		}},
	}
	specDir := filepath.Join(state, "share", "jupyter", "kernels", "python3")
	if err := os.MkdirAll(specDir, 0o755); err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(spec)
	if err := os.WriteFile(filepath.Join(specDir, "kernel.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	j.cmd = exec.Command(egPy, "-c", "from enterprise_gateway.enterprisegatewayapp import launch_instance; launch_instance()",
		"--EnterpriseGatewayApp.ip=127.0.0.1",
		"--EnterpriseGatewayApp.port="+strconv.Itoa(port),
		"--EnterpriseGatewayApp.port_retries=0",
		"--EnterpriseGatewayApp.auth_token="+j.Token,
		"--EnterpriseGatewayApp.default_kernel_name=python3",
		// GET /api/kernels is refused by default; the tests count kernels.
		"--EnterpriseGatewayApp.list_kernels=True",
		// No IOPub rate limit to turn off: EG's websocket handler reads
		// it from settings that EG never sets (0: no limit).
	)
	j.cmd.Env = []string{
		"PATH=/usr/local/bin:/usr/bin:/bin",
		"HOME=" + state,
		"LANG=C.UTF-8",
		"JUPYTER_PATH=" + filepath.Join(state, "share", "jupyter"),
		"JUPYTER_CONFIG_DIR=" + filepath.Join(state, "config"),
		"JUPYTER_DATA_DIR=" + filepath.Join(state, "data"),
		"JUPYTER_RUNTIME_DIR=" + filepath.Join(state, "runtime"),
		"IPYTHONDIR=" + filepath.Join(state, "ipython"),
		// Where the local process proxy's kernels start.
		"EG_KERNEL_WORKING_DIRECTORY=" + j.Dir,
		// EG refuses kernels for root by default (KERNEL_USERNAME, else
		// the gateway's own user); the tests may run as root.
		"EG_UNAUTHORIZED_USERS=nobody",
	}
	j.run(t, "enterprise gateway", "/api/kernelspecs") // it has no /api/status
	return j
}

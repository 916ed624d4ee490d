package kernel

import (
	"os/exec"

	"github.com/ipybox/ipybox/internal/hostproc"
	"github.com/ipybox/ipybox/internal/seccomp"
)

// startFiltered starts a kernel (or the fork server) that no sandbox
// confines under internal/seccomp's filter all the same: kernel code
// still runs with the user's rights, but no file it makes carries a
// setuid or setgid bit (which would let any local user act as the
// workspace's owner), and io_uring is refused. It runs with
// no_new_privs: a setuid program (sudo) does not raise privileges. In the
// Docker image it starts confined (hostproc.Confine): its interpreter,
// and the .pth files and sitecustomize of its venv, are the workspace's,
// which kernel code can write there.
func startFiltered(cmd *exec.Cmd) error {
	if err := hostproc.Confine(cmd); err != nil {
		return err
	}
	return seccomp.StartShared(cmd)
}

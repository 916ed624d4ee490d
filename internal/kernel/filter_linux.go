package kernel

import (
	"os/exec"

	"github.com/ipybox/ipybox/internal/seccomp"
)

// startFiltered starts a kernel (or the fork server) that no sandbox
// confines under internal/seccomp's filter all the same: kernel code
// still runs with the user's rights, but no file it makes carries a
// setuid or setgid bit (which would let any local user act as the
// workspace's owner), and io_uring is refused. It runs with
// no_new_privs: a setuid program (sudo) does not raise privileges.
func startFiltered(cmd *exec.Cmd) error {
	return seccomp.StartShared(cmd)
}

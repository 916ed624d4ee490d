//go:build !windows

package kernel

import "os"

// platformEnv adds nothing outside Windows.
func platformEnv() []string { return nil }

// confineEnv asks the kernel to confine itself (py/confine.py) where it
// runs as uid 0 in the ipybox image: there it would share the server's uid
// and own the image's files, with no capability to lose. It comes last,
// after the caller's variables, which cannot turn it off.
func confineEnv() []string {
	if os.Geteuid() == 0 && os.Getenv("IPYBOX_IN_IMAGE") != "" {
		return []string{"IPYBOX_CONFINE=1"}
	}
	return nil
}

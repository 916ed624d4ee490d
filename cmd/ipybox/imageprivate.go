package main

import (
	"os"
	"path/filepath"

	"github.com/ipybox/ipybox/internal/hostproc"
)

// imageConfigHome, in the ipybox image, makes the config folder (the
// approval policy and its log, remembered answers, OAuth sign-ins:
// os.UserConfigDir) /ipybox/config, in hostproc.ImagePrivate, which
// nothing the server starts can read or write; $HOME/.config would be
// /tmp/.config, open to kernels. An XDG_CONFIG_HOME that the operator sets
// wins (`ipybox doctor` says when it is outside /ipybox). Only ipybox's
// own commands see it, never a kernel: the server builds kernels'
// environments from scratch, drops it from stdio servers' (hostproc), and
// a container backend's kernel gets the image's environment, not this.
func imageConfigHome(getenv func(string) string) {
	if getenv(imageEnv) == "1" && getenv("XDG_CONFIG_HOME") == "" {
		os.Setenv("XDG_CONFIG_HOME", filepath.Join(hostproc.ImagePrivate, "config"))
	}
}

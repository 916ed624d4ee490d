package main

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"

	"github.com/ipybox/ipybox/internal/hostproc"
)

// imageChecks are the doctor's lines in the ipybox image (getenv(imageEnv)
// set), where kernels run without the sandbox, in the container: which of
// the image's own protections hold here. ok is false outside the image,
// where the sandbox's protections are listed instead.
func imageChecks(getenv func(string) string) (checks []check, ok bool) {
	if getenv(imageEnv) == "" {
		return nil, false
	}
	uid := os.Geteuid()
	nnp, _ := unix.PrctlRetInt(unix.PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0)
	caps := capMask("CapEff") | capMask("CapPrm")
	checks = append(checks,
		check{name: "image user", ok: true, detail: fmt.Sprintf("uid %d; the kernels run as it, in this container, without the sandbox (the container is the boundary)", uid)},
		check{name: "protection", ok: caps == 0, detail: fmt.Sprintf("no capabilities (effective and permitted %016x)", caps)},
		check{name: "protection", ok: nnp == 1, detail: "no-new-privileges: no setuid program of the image raises a kernel"},
	)
	if cfg, err := os.UserConfigDir(); err == nil && hostproc.Inside(cfg, []string{hostproc.ImagePrivate}) == "" {
		checks = append(checks, check{name: "protection", detail: fmt.Sprintf(
			"the config folder %s/ipybox (the approval policy and log, OAuth sign-ins) is outside %s: kernels can read and write it; leave XDG_CONFIG_HOME unset (ipybox then uses %s/config)", cfg, hostproc.ImagePrivate, hostproc.ImagePrivate)})
	}
	abi, _, errno := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, 0, 0, unix.LANDLOCK_CREATE_RULESET_VERSION)
	scoped := errno == 0 && int(abi) >= 6
	if uid != 0 {
		checks = append(checks, check{name: "protection", ok: true,
			detail: fmt.Sprintf("the image's files belong to root, not to uid %d: kernels cannot replace /usr/local/bin/ipybox or write /etc", uid)})
		if !scoped {
			checks = append(checks, check{name: "protection", detail: fmt.Sprintf(
				"no Landlock signal scoping (ABI 6, Linux 6.12; here %d): kernel code, and what it plants in the workspace's .ipybox (the venv, the registry), can signal the server and read and write its own files (%s)", int(abi), hostproc.ImagePrivate)})
			return checks, true
		}
	}
	if uid != 0 {
		checks = append(checks, startedConfined(int(abi)))
		return checks, true
	}
	if !scoped {
		checks = append(checks, check{name: "protection", detail: fmt.Sprintf(
			"kernels as root need Landlock with signal scoping (ABI 6, Linux 6.12; here %d): they will not start; run the container as the workspace's owner (docker run --user UID:GID)", int(abi))})
		return checks, true
	}
	checks = append(checks, check{name: "protection", ok: true, detail: fmt.Sprintf(
		"kernels as root are confined by Landlock (ABI %d): the image's system folders (/usr, /etc, /bin, /lib, /var, /opt, /boot, /root) read-only to them; no signal to the server or to other kernels; no abstract socket outside their own", int(abi))}, startedConfined(int(abi)))
	return checks, true
}

// startedConfined is the doctor's line for hostproc.Confine.
func startedConfined(abi int) check {
	return check{name: "protection", ok: true, detail: fmt.Sprintf(
		"every process the server starts (kernels, the fork server, stdio MCP servers, pip and venv helpers) starts in a Landlock domain of its own (ABI %d) before its first instruction: what kernel code plants in the workspace's .ipybox (a .pth, bin/python, the registry) runs no freer than kernel code, and signals neither the server nor other sessions; none of them reads or writes %s, the server's own files (its config folder: the approval policy and log, remembered answers, OAuth sign-ins; a --state-dir outside the workspace)", abi, hostproc.ImagePrivate)}
}

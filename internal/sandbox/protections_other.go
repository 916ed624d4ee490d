//go:build !linux

package sandbox

import (
	"fmt"
	"runtime"

	"github.com/ipybox/ipybox/internal/hostpaths"
)

func protections() []string {
	if runtime.GOOS != "darwin" {
		return nil
	}
	return []string{
		"no setuid or setgid file: the Seatbelt profile denies file-write-setugid",
		fmt.Sprintf("workspace guard: %d kinds of host-read paths denied by the Seatbelt profile at any depth", len(hostpaths.Entries)),
		"secrets masked: .env, .env.*, files that server configs name",
	}
}

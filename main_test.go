package ipybox_test

import (
	"os"
	"testing"

	"github.com/ipybox/ipybox/sandbox"
)

// TestMain lets the test binary serve as the sandbox's init, which the
// sandbox starts by re-executing os.Executable() (in production, the ipybox
// binary).
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == sandbox.InitCommand {
		os.Exit(sandbox.InitMain(os.Args[2:]))
	}
	os.Exit(m.Run())
}

package ipybox_test

import (
	"os"
	"testing"

	"github.com/ipybox/ipybox"
	"github.com/ipybox/ipybox/internal/testenv"
)

// TestMain lets the test binary serve as the sandbox's init, which the
// sandbox starts by re-executing os.Executable() (in production, the ipybox
// binary).
func TestMain(m *testing.M) {
	ipybox.SandboxInit()
	// The examples run kernels, and one an npm server: without them they
	// skip, as the tests do, rather than fail on their output.
	testenv.SkipExamples("^Example", testenv.HavePython)
	testenv.SkipExamples("^ExampleExecutor_RegisterMCPServer$", testenv.HaveNPMBin("mcp-server-everything"))
	os.Exit(m.Run())
}

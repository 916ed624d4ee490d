package ipybox_test

import (
	"os"
	"testing"

	"github.com/ipybox/ipybox/internal/testenv"
	"github.com/ipybox/ipybox/sandbox"
)

// TestMain lets the test binary serve as the sandbox's init, which the
// sandbox starts by re-executing os.Executable() (in production, the ipybox
// binary).
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == sandbox.InitCommand {
		os.Exit(sandbox.InitMain(os.Args[2:]))
	}
	// The examples run kernels, and one an npm server: without them they
	// skip, as the tests do, rather than fail on their output.
	testenv.SkipExamples("^Example", testenv.HavePython)
	testenv.SkipExamples("^ExampleExecutor_RegisterMCPServer$", testenv.HaveNPMBin("mcp-server-everything"))
	os.Exit(m.Run())
}

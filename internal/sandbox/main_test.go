package sandbox

import (
	"os"
	"testing"
)

// TestMain makes the test binary double as the sandbox's init (the way the
// ipybox binary does) and as the helper processes some tests need.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == InitCommand {
		os.Exit(InitMain(os.Args[2:]))
	}
	if h := os.Getenv(helperEnv); h != "" {
		f, ok := helpers[h]
		if !ok {
			os.Exit(3)
		}
		os.Exit(f())
	}
	for _, f := range beforeTests {
		f()
	}
	os.Exit(m.Run())
}

// beforeTests run before the tests, outside any test's goroutine check
// (linux tests register theirs in init functions).
var beforeTests []func()

// helperEnv selects a helper role for a re-executed test binary.
const helperEnv = "IPYBOX_SANDBOX_TEST_HELPER"

// helpers are the roles a re-executed test binary can play; linux tests
// register theirs in init functions.
var helpers = map[string]func() int{}

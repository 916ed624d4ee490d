//go:build !linux

package hostproc

import (
	"fmt"
	"os"
	"os/exec"
)

// ConfineCommand is the hidden subcommand of ipybox's binary through which,
// in the Docker image (Linux), every process that the server starts runs.
const ConfineCommand = "_ipybox-confine"

// Confine does nothing outside Linux: the ipybox image is Linux's.
func Confine(cmd *exec.Cmd) error { return nil }

// ConfineMain is ConfineCommand, which only the image (Linux) uses.
func ConfineMain(args []string) int {
	fmt.Fprintf(os.Stderr, "ipybox %s: only in the ipybox image (Linux)\n", ConfineCommand)
	return 1
}

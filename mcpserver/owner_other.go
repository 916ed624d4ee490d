//go:build !unix

package mcpserver

import "os"

// fileOwner: no uids here.
func fileOwner(os.FileInfo) (int, bool) { return 0, false }

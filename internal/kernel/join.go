package kernel

import "os"

// JoinRequest is what a sandbox fork server needs to fork a kernel into
// a sandbox.
type JoinRequest struct {
	// Namespaces are the sandbox's namespace descriptors, in the order to
	// join them.
	Namespaces []*os.File
	// Setup is the init's setup socket, Report its report socket.
	Setup, Report *os.File
	// UID and GID are the kernel's ids inside the sandbox.
	UID, GID int
}

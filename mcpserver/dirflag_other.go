//go:build !unix

package mcpserver

// oDirectory is O_DIRECTORY where it exists; elsewhere ReadDir refuses
// what is not a directory.
const oDirectory = 0

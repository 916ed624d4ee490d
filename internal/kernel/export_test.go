package kernel

// UseTCP makes kernels started with o use TCP on 127.0.0.1, as they do on
// Windows, instead of ipc sockets.
func UseTCP(o *Options) { o.tcp = true }

// SetMaxCellImageBytes sets the images budget of a cell, and returns what
// restores it.
func SetMaxCellImageBytes(n int) func() {
	old := maxCellImageBytes
	maxCellImageBytes = n
	return func() { maxCellImageBytes = old }
}

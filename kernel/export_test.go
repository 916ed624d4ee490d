package kernel

// UseTCP makes kernels started with o use TCP on 127.0.0.1, as they do on
// Windows, instead of ipc sockets.
func UseTCP(o *Options) { o.tcp = true }

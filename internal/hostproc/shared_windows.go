package hostproc

// SharedAbove is "" on Windows, which has no such modes.
func SharedAbove(p string) string { return "" }

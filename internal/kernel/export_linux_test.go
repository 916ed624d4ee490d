//go:build linux

package kernel

// ZygotePid returns the pid of z's running zygote process, or 0.
func ZygotePid(z *Zygote) int {
	z.mu.Lock()
	defer z.mu.Unlock()
	if z.cur == nil {
		return 0
	}
	return z.cur.cmd.Process.Pid
}

// ZygoteDead reports whether z's zygote process has been seen to exit.
func ZygoteDead(z *Zygote) bool {
	z.mu.Lock()
	defer z.mu.Unlock()
	if z.cur == nil {
		return true
	}
	select {
	case <-z.cur.dead:
		return true
	default:
		return false
	}
}

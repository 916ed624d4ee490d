package main

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// scrubInitialEnv overwrites with NULs the value of every name=value entry
// of the environment block the kernel gave this process at exec, which
// /proc/PID/environ shows (to root, and to this user until harden makes
// the process non-dumpable). The block lies between env_start and env_end
// of /proc/self/stat, in the process's own memory, which /proc/self/mem
// reads and writes without ptrace. Failures are ignored: the value is then
// where it was before.
func scrubInitialEnv(name string) {
	start, end, err := envBlock()
	if err != nil || end <= start || end-start > 1<<24 {
		return
	}
	mem, err := os.OpenFile("/proc/self/mem", os.O_RDWR, 0)
	if err != nil {
		return
	}
	defer mem.Close()
	block := make([]byte, end-start)
	if _, err := mem.ReadAt(block, start); err != nil {
		return
	}
	prefix := []byte(name + "=")
	for off := 0; off < len(block); {
		entry := block[off:]
		if i := bytes.IndexByte(entry, 0); i >= 0 {
			entry = entry[:i]
		}
		if bytes.HasPrefix(entry, prefix) && len(entry) > len(prefix) {
			mem.WriteAt(make([]byte, len(entry)-len(prefix)), start+int64(off+len(prefix)))
		}
		off += len(entry) + 1
	}
}

// envBlock reads env_start and env_end (fields 50 and 51) of
// /proc/self/stat.
func envBlock() (start, end int64, err error) {
	b, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		return 0, 0, err
	}
	// The command name (field 2) is in parentheses and may hold spaces.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, 0, fmt.Errorf("/proc/self/stat: no command name")
	}
	f := strings.Fields(string(b[i+1:])) // f[0] is field 3
	if len(f) < 51-2 {
		return 0, 0, fmt.Errorf("/proc/self/stat: %d fields, no env_end", len(f)+2)
	}
	if start, err = strconv.ParseInt(f[50-3], 10, 64); err != nil {
		return 0, 0, err
	}
	end, err = strconv.ParseInt(f[51-3], 10, 64)
	return start, end, err
}

package telemetry

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
)

// maxTree bounds the processes one kernel's memory is summed over: kernel
// code chooses how many it starts, and a scrape must stay quick.
const maxTree = 1024

// treeRSS returns the resident memory of pid and its descendants, from
// /proc: the kernel of a sandbox or a container runs below bwrap or the
// container's init, and what a cell started counts too.
func treeRSS(pid int) (int64, bool) {
	page := int64(os.Getpagesize())
	var total int64
	seen := 0
	queue := []int{pid}
	for len(queue) > 0 && seen < maxTree {
		p := queue[0]
		queue = queue[1:]
		seen++
		b, err := os.ReadFile("/proc/" + strconv.Itoa(p) + "/statm")
		if err != nil {
			if p == pid {
				return 0, false
			}
			continue // it ended meanwhile
		}
		// statm: size resident shared ... (in pages)
		f := bytes.Fields(b)
		if len(f) < 2 {
			continue
		}
		if n, err := strconv.ParseInt(string(f[1]), 10, 64); err == nil {
			total += n * page
		}
		queue = append(queue, children(p)...)
	}
	return total, true
}

// children lists pid's child processes (every thread's children file).
func children(pid int) []int {
	tasks, _ := filepath.Glob("/proc/" + strconv.Itoa(pid) + "/task/*/children")
	var out []int
	for _, t := range tasks {
		b, err := os.ReadFile(t)
		if err != nil {
			continue
		}
		for _, f := range bytes.Fields(b) {
			if n, err := strconv.Atoi(string(f)); err == nil {
				out = append(out, n)
			}
		}
	}
	return out
}

package testenv

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// Proc is one process as /proc shows it.
type Proc struct {
	Pid, PPid, Pgrp int
	State           string // "R", "S", "Z", ...
	Cmdline         string // arguments joined by spaces
}

// Processes lists the live (non-zombie) processes of the machine.
func Processes() []Proc {
	var out []Proc
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		p, ok := readProc(pid)
		if ok && p.State != "Z" {
			out = append(out, p)
		}
	}
	return out
}

func readProc(pid int) (Proc, bool) {
	dir := filepath.Join("/proc", strconv.Itoa(pid))
	b, err := os.ReadFile(filepath.Join(dir, "stat"))
	if err != nil {
		return Proc{}, false
	}
	// pid (comm) state ppid pgrp ...; comm may hold spaces and parentheses.
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 3 {
		return Proc{}, false
	}
	p := Proc{Pid: pid, State: f[0]}
	p.PPid, _ = strconv.Atoi(f[1])
	p.Pgrp, _ = strconv.Atoi(f[2])
	cmd, _ := os.ReadFile(filepath.Join(dir, "cmdline"))
	p.Cmdline = strings.TrimSpace(strings.ReplaceAll(string(cmd), "\x00", " "))
	return p, true
}

// Alive reports whether pid is a live (non-zombie) process.
func Alive(pid int) bool {
	p, ok := readProc(pid)
	return ok && p.State != "Z"
}

// GroupMembers lists the live processes of process group pgid.
func GroupMembers(pgid int) []Proc {
	var out []Proc
	for _, p := range Processes() {
		if p.Pgrp == pgid {
			out = append(out, p)
		}
	}
	return out
}

// Descendants lists the live processes below pid, sorted by pid.
func Descendants(pid int) []Proc {
	procs := Processes()
	children := map[int][]Proc{}
	for _, p := range procs {
		children[p.PPid] = append(children[p.PPid], p)
	}
	var out []Proc
	var walk func(int)
	walk = func(p int) {
		for _, c := range children[p] {
			out = append(out, c)
			walk(c.Pid)
		}
	}
	walk(pid)
	slices.SortFunc(out, func(a, b Proc) int { return a.Pid - b.Pid })
	return out
}

package seccomp

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// bpfAsm assembles a classic BPF program with forward jumps to labels.
type bpfAsm struct {
	ins    []unix.SockFilter
	labels map[string]int
	refs   []bpfRef
}

type bpfRef struct {
	at     int
	jt, jf string // "" means the next instruction
}

func (a *bpfAsm) stmt(code uint16, k uint32) {
	a.ins = append(a.ins, unix.SockFilter{Code: code, K: k})
}

func (a *bpfAsm) jump(op uint16, k uint32, jt, jf string) {
	a.refs = append(a.refs, bpfRef{len(a.ins), jt, jf})
	a.ins = append(a.ins, unix.SockFilter{Code: unix.BPF_JMP | op | unix.BPF_K, K: k})
}

func (a *bpfAsm) label(name string) {
	if a.labels == nil {
		a.labels = map[string]int{}
	}
	if _, dup := a.labels[name]; dup {
		panic("bpf: label defined twice: " + name)
	}
	a.labels[name] = len(a.ins)
}

func (a *bpfAsm) assemble() ([]unix.SockFilter, error) {
	off := func(from int, l string) (uint8, error) {
		if l == "" {
			return 0, nil
		}
		to, ok := a.labels[l]
		if !ok {
			return 0, fmt.Errorf("bpf: undefined label %q", l)
		}
		d := to - from - 1
		if d < 0 || d > 255 {
			return 0, fmt.Errorf("bpf: jump to %q out of range", l)
		}
		return uint8(d), nil
	}
	for _, r := range a.refs {
		jt, err := off(r.at, r.jt)
		if err != nil {
			return nil, err
		}
		jf, err := off(r.at, r.jf)
		if err != nil {
			return nil, err
		}
		a.ins[r.at].Jt, a.ins[r.at].Jf = jt, jf
	}
	if len(a.ins) > 4096 {
		return nil, fmt.Errorf("bpf: %d instructions, more than the kernel accepts", len(a.ins))
	}
	return a.ins, nil
}

package sandbox

import (
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The seccomp filter is written by hand as classic BPF; there is no
// libseccomp. It
//   - kills the process on a foreign audit architecture (for example i386
//     system calls through int 0x80 on amd64),
//   - fails x32 system calls (number with bit 30 set) with EPERM,
//   - fails io_uring_setup, io_uring_enter and io_uring_register (io_uring
//     bypasses seccomp for the operations it performs) with EPERM,
//   - fails keyctl, add_key and request_key with EPERM (the user's kernel
//     keyrings are shared with the host user),
//   - fails socket(AF_VSOCK, …) with EPERM (a path to the hypervisor's
//     host), and socket(AF_UNIX, …) too when asked;
//   - fails memfd_create, memfd_secret and shmget with ENOSYS, and shared
//     anonymous mmap with EPERM: memory held that way escapes the memory
//     limit (RLIMIT_DATA counts private mappings only).

// Offsets in struct seccomp_data.
const (
	seccompNr      = 0
	seccompArch    = 4
	seccompArg0Low = 16 // low 32 bits of args[0] (little-endian)
)

const x32Bit = 0x40000000

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
	return a.ins, nil
}

// seccompProgram returns the filter for this architecture.
func seccompProgram(denyUnix bool) ([]unix.SockFilter, error) {
	if auditArch == 0 {
		return nil, fmt.Errorf("no filter for this architecture")
	}
	const (
		ld    = unix.BPF_LD | unix.BPF_W | unix.BPF_ABS
		ret   = unix.BPF_RET | unix.BPF_K
		eperm = unix.SECCOMP_RET_ERRNO | uint32(unix.EPERM)
	)
	var a bpfAsm
	a.stmt(ld, seccompArch)
	a.jump(unix.BPF_JEQ, auditArch, "arch_ok", "")
	a.stmt(ret, unix.SECCOMP_RET_KILL_PROCESS)
	a.label("arch_ok")
	a.stmt(ld, seccompNr)
	if hasX32 {
		a.jump(unix.BPF_JSET, x32Bit, "eperm", "")
	}
	for _, nr := range deniedSyscalls {
		a.jump(unix.BPF_JEQ, uint32(nr), "eperm", "")
	}
	for _, nr := range unavailableSyscalls {
		a.jump(unix.BPF_JEQ, uint32(nr), "enosys", "")
	}
	a.jump(unix.BPF_JEQ, uint32(unix.SYS_MMAP), "mmap", "")
	a.jump(unix.BPF_JEQ, uint32(unix.SYS_SOCKET), "socket", "")
	a.stmt(ret, unix.SECCOMP_RET_ALLOW)
	a.label("mmap")
	a.stmt(ld, seccompArg0Low+3*8) // flags
	a.stmt(unix.BPF_ALU|unix.BPF_AND|unix.BPF_K, unix.MAP_SHARED|unix.MAP_ANONYMOUS)
	a.jump(unix.BPF_JEQ, unix.MAP_SHARED|unix.MAP_ANONYMOUS, "eperm", "")
	a.stmt(ret, unix.SECCOMP_RET_ALLOW)
	a.label("enosys")
	a.stmt(ret, unix.SECCOMP_RET_ERRNO|uint32(unix.ENOSYS))
	a.label("socket")
	a.stmt(ld, seccompArg0Low)
	a.jump(unix.BPF_JEQ, unix.AF_VSOCK, "eperm", "")
	if denyUnix {
		a.jump(unix.BPF_JEQ, unix.AF_UNIX, "eperm", "")
	}
	a.stmt(ret, unix.SECCOMP_RET_ALLOW)
	a.label("eperm")
	a.stmt(ret, eperm)
	return a.assemble()
}

// unavailableSyscalls fail with ENOSYS, as on a kernel without them, so
// that programs fall back: memory they would hand out is bounded by
// nothing (memfd_create, System V shared memory in the sandbox's own IPC
// namespace); files in /dev/shm and /tmp, where the fallbacks go, are.
var unavailableSyscalls = []uintptr{
	unix.SYS_MEMFD_CREATE, unix.SYS_MEMFD_SECRET, unix.SYS_SHMGET,
}

var deniedSyscalls = []uintptr{
	unix.SYS_IO_URING_SETUP, unix.SYS_IO_URING_ENTER, unix.SYS_IO_URING_REGISTER,
	unix.SYS_KEYCTL, unix.SYS_ADD_KEY, unix.SYS_REQUEST_KEY,
}

// installSeccomp applies prog to the calling thread (no_new_privs must be
// set). Without TSYNC it covers only this thread, which then execs.
func installSeccomp(prog []unix.SockFilter) error {
	fprog := unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}
	return unix.Prctl(unix.PR_SET_SECCOMP, unix.SECCOMP_MODE_FILTER, uintptr(unsafe.Pointer(&fprog)), 0, 0)
}

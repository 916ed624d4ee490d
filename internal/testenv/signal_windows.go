package testenv

import (
	"errors"
	"syscall"

	"golang.org/x/sys/windows"
)

// Signal does what the tests ask of syscall.Kill where Windows can: signal
// 0 probes (syscall.ESRCH when pid is gone), SIGKILL and SIGTERM
// terminate. Other signals are unsupported.
func Signal(pid int, sig syscall.Signal) error {
	h, err := windows.OpenProcess(windows.PROCESS_TERMINATE|windows.PROCESS_QUERY_LIMITED_INFORMATION, false, uint32(pid))
	if err != nil {
		return syscall.ESRCH
	}
	defer windows.CloseHandle(h)
	switch sig {
	case 0:
		var code uint32
		if windows.GetExitCodeProcess(h, &code) == nil && code != 259 { // STILL_ACTIVE
			return syscall.ESRCH
		}
		return nil
	case syscall.SIGKILL, syscall.SIGTERM:
		return windows.TerminateProcess(h, 1)
	}
	return errors.New("testenv: signal " + sig.String() + " is not supported on windows")
}

// Mkfifo fails: Windows has no named pipes in the file system.
func Mkfifo(path string) error { return errors.New("testenv: no FIFOs on windows") }

// Suspend fails: there is no SIGSTOP on windows.
func Suspend(pid int) error { return errors.New("testenv: no SIGSTOP on windows") }

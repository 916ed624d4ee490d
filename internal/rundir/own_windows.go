package rundir

import (
	"errors"
	"os"

	"golang.org/x/sys/windows"
)

// ownDir reports whether path is a directory, not a link or a junction.
// The run root is under the user's own %TEMP%, which other users cannot
// write.
func ownDir(path string) bool {
	fi, err := os.Lstat(path)
	return err == nil && fi.IsDir() && fi.Mode()&os.ModeIrregular == 0
}

// processGone reports whether no running process has the given pid.
func processGone(pid int) bool {
	h, err := windows.OpenProcess(windows.PROCESS_QUERY_LIMITED_INFORMATION, false, uint32(pid))
	if err != nil {
		return errors.Is(err, windows.ERROR_INVALID_PARAMETER)
	}
	defer windows.CloseHandle(h)
	var code uint32
	if windows.GetExitCodeProcess(h, &code) != nil {
		return false
	}
	return code != 259 // STILL_ACTIVE
}

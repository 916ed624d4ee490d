package container

import "errors"

// chooseUser: the container backend shares unix sockets with the
// container through a bind mount, which Docker Desktop on Windows cannot
// do.
func (l *Launcher) chooseUser() error {
	return errors.New("container: the container backend runs on Linux only")
}

func (l *Launcher) idmapBinds() {}

func processGone(int) bool { return false }

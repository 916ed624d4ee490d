//go:build !linux

package container

import "errors"

func idmapMount(string, int, int, int, int) (string, error) {
	return "", errors.New("idmapped mounts need Linux")
}

func detachIdmap(string) error { return nil }

func reapIdmaps() int { return 0 }

func plainMount(string) (string, error) {
	return "", errors.New("nosuid clones need Linux")
}

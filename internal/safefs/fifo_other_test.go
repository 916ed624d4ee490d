//go:build !unix

package safefs

import "errors"

func mkfifo(string) error { return errors.New("no FIFOs here") }

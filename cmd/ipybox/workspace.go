package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/ipybox/ipybox"
)

// ensureWorkspace creates the --workspace directory when it does not exist
// (its parents too), and says so on stderr; an existing non-directory is an
// error.
func ensureWorkspace(env *cliEnv, cmd, dir string) error {
	fi, err := os.Stat(dir)
	switch {
	case err == nil && fi.IsDir():
		return nil
	case err == nil:
		return fmt.Errorf("--workspace %s is not a directory; choose a directory", dir)
	case !errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("--workspace: %w", err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("--workspace: create %s: %w", dir, err)
	}
	fmt.Fprintf(env.stderr, "%s: created the workspace %s\n", cmd, dir)
	return nil
}

// imageEnv is set in the ipybox image (Dockerfile): errors then give the
// docker run command that fixes them.
const imageEnv = "IPYBOX_IN_IMAGE"

// imageWorkspace is the workspace's path in the image.
const imageWorkspace = "/app/workspace"

// workspaceError turns an error of ipybox.CheckWorkspace into one that
// says what to do, with the command: in the image, the docker run
// option that runs the container as the directory's owner; elsewhere,
// the chown or chmod that lets this user write it.
func workspaceError(env *cliEnv, dir string, httpMode bool, err error) error {
	msg := strings.TrimPrefix(err.Error(), "ipybox: ")
	if !errors.Is(err, ipybox.ErrWorkspaceNotWritable) {
		return errors.New(msg)
	}
	abs, aerr := filepath.Abs(dir)
	if aerr != nil {
		abs = dir
	}
	ou, og, ok := dirOwner(abs)
	if !ok {
		return fmt.Errorf("%s; give this user write access to it, or choose another --workspace", msg)
	}
	uid, gid := os.Getuid(), os.Getgid()
	switch {
	case env.getenv(imageEnv) != "" && abs == imageWorkspace && httpMode:
		return fmt.Errorf("%s; run the container as the directory's owner: add --user %d:%d to the docker run command", msg, ou, og)
	case env.getenv(imageEnv) != "" && abs == imageWorkspace:
		return fmt.Errorf("%s; run the container as the directory's owner: docker run -i --rm --user %d:%d -v \"$PWD\":%s ipybox", msg, ou, og, imageWorkspace)
	case ou == uid:
		return fmt.Errorf("%s; let its owner write it: chmod u+rwx %s", msg, abs)
	}
	return fmt.Errorf("%s; run ipybox as the directory's owner (uid %d), or give it to this user: chown %d:%d %s; or choose another --workspace", msg, ou, uid, gid, abs)
}

package jupyter

import (
	"context"
	"fmt"
	"net"
	"strconv"

	"github.com/go-zeromq/zmq4/transport"
	"golang.org/x/sys/unix"
)

// dialNoFollow connects to the unix socket at path, refusing a link.
func dialNoFollow(ctx context.Context, d transport.Dialer, path string) (net.Conn, error) {
	fd, err := unix.Open(path, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &net.OpError{Op: "dial", Net: "unix", Err: err} // not bound yet: zmq4 retries
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFSOCK {
		return nil, fmt.Errorf("jupyter: %s is not a socket (a link, or a file put there instead); refusing to connect", path)
	}
	return d.DialContext(ctx, "unix", "/proc/self/fd/"+strconv.Itoa(fd))
}

package jupyter

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestDialRefusesLinks: a link planted where a kernel socket should be is
// not dialed, even when it leads to a listening socket.
func TestDialRefusesLinks(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "real.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	link := filepath.Join(dir, "k-1")
	if err := os.Symlink(sock, link); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "k-2")
	os.WriteFile(file, nil, 0o600)
	var d net.Dialer
	for _, p := range []string{link, file} {
		if c, err := dialNoFollow(context.Background(), &d, p); err == nil || !strings.Contains(err.Error(), "not a socket") {
			if c != nil {
				c.Close()
			}
			t.Errorf("dial %s: %v, want a refusal", p, err)
		}
	}
	c, err := dialNoFollow(context.Background(), &d, sock)
	if err != nil {
		t.Fatalf("the real socket: %v", err)
	}
	c.Close()
}

package docker

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
)

func TestNewHost(t *testing.T) {
	for _, tc := range []struct {
		host, tls, want string // want: base URL, or an error substring
	}{
		{"unix:///var/run/docker.sock", "", "http://docker"},
		{"tcp://127.0.0.1:2375", "", "http://127.0.0.1:2375"},
		{"tcp://127.0.0.1:2376", "1", "TLS to the daemon is not supported"},
		{"tcp://nohost", "", "want tcp://HOST:PORT"},
		{"unix://relative.sock", "", "absolute socket path"},
		{"ssh://me@host", "", "scheme ssh is not supported"},
		{"/var/run/docker.sock", "", "want unix:///path"},
	} {
		t.Setenv("DOCKER_TLS_VERIFY", tc.tls)
		c, err := New(tc.host)
		got := ""
		if err != nil {
			got = err.Error()
		} else {
			got = c.base
		}
		if !strings.Contains(got, tc.want) {
			t.Errorf("New(%q) = %q, want %q", tc.host, got, tc.want)
		}
	}
}

func TestNewFromDockerHost(t *testing.T) {
	t.Setenv("DOCKER_HOST", "tcp://127.0.0.1:1")
	c, err := New("")
	if err != nil || c.Host() != "tcp://127.0.0.1:1" {
		t.Fatalf("DOCKER_HOST not honoured: %v %v", c, err)
	}
}

func frame(stream byte, s string) []byte {
	h := make([]byte, 8)
	h[0] = stream
	binary.BigEndian.PutUint32(h[4:], uint32(len(s)))
	return append(h, s...)
}

func TestDemux(t *testing.T) {
	var in bytes.Buffer
	in.Write(frame(1, "out1 "))
	in.Write(frame(2, "err1"))
	in.Write(frame(1, "out2"))
	var out, errb bytes.Buffer
	if err := Demux(&in, &out, &errb); err != nil {
		t.Fatal(err)
	}
	if out.String() != "out1 out2" || errb.String() != "err1" {
		t.Errorf("stdout %q, stderr %q", out.String(), errb.String())
	}
	// A truncated frame is an error, not a silent end.
	trunc := frame(1, "abcdef")[:10]
	if err := Demux(bytes.NewReader(trunc), &out, nil); err == nil {
		t.Error("truncated frame: no error")
	}
}

// TestAPIErrors: the daemon's error answers become *APIError, 404 is
// ErrNotFound, over a unix socket as DOCKER_HOST names it.
func TestAPIErrors(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "d.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/_ping":
			w.Write([]byte("OK"))
		case "/images/nope/json":
			w.WriteHeader(404)
			w.Write([]byte(`{"message":"No such image: nope"}`))
		default:
			w.WriteHeader(500)
			w.Write([]byte(`{"message":"boom"}`))
		}
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	t.Setenv("DOCKER_HOST", "unix://"+sock)
	c, err := New("")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	if err := c.Ping(ctx); err != nil {
		t.Errorf("ping: %v", err)
	}
	_, err = c.ImageInspect(ctx, "nope")
	if !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), "No such image: nope") {
		t.Errorf("inspect: %v", err)
	}
	if err := c.Start(ctx, "x"); err == nil || !strings.Contains(err.Error(), "boom (HTTP 500)") {
		t.Errorf("start: %v", err)
	}
	if err := c.Remove(ctx, "gone", true); err == nil {
		t.Errorf("remove with a 500: no error")
	}
}

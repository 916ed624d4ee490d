package ipybox_test

import (
	"context"
	"errors"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/ipybox/ipybox"
	"github.com/ipybox/ipybox/internal/mcptest"
	"github.com/ipybox/ipybox/internal/testenv"
	"github.com/ipybox/ipybox/mcpserver"
)

// TestRemote drives an ipybox mcp server through the Go SDK's Remote: a
// program creates a session, runs cells, reconnects to the same kernel
// with its handle, streams output in order, answers approvals, and closes
// the session. Another principal's Remote cannot use the handle.
func TestRemote(t *testing.T) {
	testenv.NeedsPython(t)
	const tok, otherTok = "remote-token-0123456789", "other-token-0123456789"
	srv, err := mcpserver.New(&mcpserver.Options{
		Workspace: t.TempDir(),
		Servers:   map[string]ipybox.ServerConfig{"rg": {Command: mcptest.Build(t)}},
		Approvals: mcpserver.ApprovalOptions{
			Mode: mcpserver.ApprovalElicit,
		},
		Sessions: mcpserver.SessionOptions{
			StartTimeout: 90 * time.Second,
		},
		HTTP: mcpserver.HTTPOptions{
			Principals: map[string]string{"me": tok, "other": otherTok},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	hs := httptest.NewServer(srv.Handler())
	defer hs.Close()
	url := hs.URL + "/mcp"

	r, err := ipybox.Dial(t.Context(), url, &ipybox.RemoteOptions{Token: tok})
	if err != nil {
		t.Fatal(err)
	}
	s, err := r.CreateSession(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Execute(t.Context(), "x = 41", nil); err != nil {
		t.Fatal(err)
	}
	handle := s.Handle()
	r.Close()

	// A new connection, as after the program restarted.
	r, err = ipybox.Dial(t.Context(), url, &ipybox.RemoteOptions{Token: tok,
		Approver: func(_ context.Context, a *ipybox.ApprovalRequest) error {
			if a.Tool == "tool-1" {
				return nil
			}
			return errors.New("not that one")
		}})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	s = r.Session(handle)
	res, err := s.Execute(t.Context(), "print(x + 1)", nil)
	if err != nil || res.Text != "42" {
		t.Fatalf("after reconnecting: %v %+v", err, res)
	}
	list, err := r.Sessions(t.Context())
	if err != nil || len(list) != 1 || list[0].Handle != handle || !list[0].Kernel {
		t.Errorf("Sessions: %v %+v", err, list)
	}

	// Output in order, then an approval answered through Stream, then
	// more output.
	code := "import sys, time\nfor i in range(3):\n    sys.stdout.write(f'{i}\\n'); sys.stdout.flush(); time.sleep(0.1)\n" +
		"from mcptools.rg.tool_1 import Params, run\nprint(run(Params(s='ok')))\nprint('end')"
	var out strings.Builder
	var asked []*ipybox.ApprovalRequest
	var last *ipybox.Result
	for ev, err := range s.Stream(t.Context(), code, nil) {
		if err != nil {
			t.Fatal(err)
		}
		switch ev := ev.(type) {
		case *ipybox.Output:
			if last != nil {
				t.Error("output after the result")
			}
			out.WriteString(ev.Text)
		case *ipybox.ApprovalRequest:
			asked = append(asked, ev)
			go ev.Accept() // later, from another goroutine
		case *ipybox.Result:
			last = ev
		}
	}
	if out.String() != "0\n1\n2\ntool-1: ok\nend\n" || last == nil || last.Text != "0\n1\n2\ntool-1: ok\nend" {
		t.Errorf("streamed %q, result %+v", out.String(), last)
	}
	if len(asked) != 1 || asked[0].Kind != "tool" || asked[0].Server != "rg" || asked[0].Tool != "tool-1" || string(asked[0].Args) != `{"s":"ok"}` {
		t.Errorf("approvals: %+v", asked)
	}

	// Execute: the Approver accepts tool-1 and rejects a shell command.
	res, err = s.Execute(t.Context(), "from mcptools.rg.tool_1 import Params, run\nprint(run(Params(s='a')))\n!echo no", nil)
	var pe *ipybox.PythonError
	if !errors.As(err, &pe) || pe.Name != "ApprovalRejectedError" || !strings.Contains(pe.Value, "not that one") || res == nil || !strings.HasPrefix(res.Text, "tool-1: a") {
		t.Errorf("Execute with an Approver: %v %+v", err, res)
	}
	if _, err := s.Execute(t.Context(), "import time; time.sleep(30)", &ipybox.ExecOptions{Timeout: time.Second}); !errors.Is(err, ipybox.ErrTimeout) {
		t.Errorf("a timeout: %v", err)
	}

	// Another principal.
	other, err := ipybox.Dial(t.Context(), url, &ipybox.RemoteOptions{Token: otherTok})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if _, err := other.Session(handle).Execute(t.Context(), "print(x)", nil); err == nil || !strings.Contains(err.Error(), "unknown session") {
		t.Errorf("another principal: %v", err)
	}

	if err := s.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Execute(t.Context(), "print(x)", nil); err == nil || !strings.Contains(err.Error(), "unknown session") {
		t.Errorf("after Close: %v", err)
	}
}

// TestRemoteOverStdio: Dial with a Transport speaks to a server over another
// transport (here the in-memory one that stdio's code path uses).
func TestRemoteOverStdio(t *testing.T) {
	testenv.NeedsPython(t)
	srv, err := mcpserver.New(&mcpserver.Options{Workspace: t.TempDir(), Sessions: mcpserver.SessionOptions{StartTimeout: 90 * time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	ct, st := mcp.NewInMemoryTransports()
	go srv.Serve(context.Background(), st)
	r, err := ipybox.Dial(t.Context(), "", &ipybox.RemoteOptions{Transport: ct})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	s, err := r.CreateSession(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Execute(t.Context(), "y = 6 * 7", nil); err != nil {
		t.Fatal(err)
	}
	if res, err := s.Execute(t.Context(), "print(y)", nil); err != nil || res.Text != "42" {
		t.Errorf("%v %+v", err, res)
	}
	if err := s.Reset(t.Context()); err != nil {
		t.Fatal(err)
	}
	var pe *ipybox.PythonError
	if _, err := s.Execute(t.Context(), "y", nil); !errors.As(err, &pe) || pe.Name != "NameError" {
		t.Errorf("after Reset: %v", err)
	}
}

// TestRemoteCloseDoesNotWaitForCells: Close with a cell's call in flight
// returns at once; the call ends with an error, and the cell is
// interrupted, the kernel keeping its state. (Before, Close waited, in the
// go-sdk's Close, for the call: until the cell ended, up to its timeout.)
func TestRemoteCloseDoesNotWaitForCells(t *testing.T) {
	testenv.NeedsPython(t)
	srv, err := mcpserver.New(&mcpserver.Options{Workspace: t.TempDir(), Sessions: mcpserver.SessionOptions{StartTimeout: 90 * time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	ct, st := mcp.NewInMemoryTransports()
	go srv.Serve(context.Background(), st)
	r, err := ipybox.Dial(t.Context(), "", &ipybox.RemoteOptions{Transport: ct})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	s, err := r.CreateSession(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Execute(t.Context(), "x = 41", nil); err != nil {
		t.Fatal(err)
	}
	started := make(chan struct{})
	ended := make(chan error, 1)
	go func() {
		var last error
		once := false
		for ev, err := range s.Stream(t.Context(), "import time\nprint('started', flush=True)\ntime.sleep(60)", nil) {
			if o, ok := ev.(*ipybox.Output); ok && strings.Contains(o.Text, "started") && !once {
				once = true
				close(started)
			}
			if err != nil {
				last = err
			}
		}
		ended <- last
	}()
	select {
	case <-started:
	case <-time.After(90 * time.Second):
		t.Fatal("the cell did not start")
	}
	closed := make(chan error, 1)
	t0 := time.Now()
	go func() { closed <- r.Close() }()
	select {
	case <-closed:
	case <-time.After(15 * time.Second):
		t.Fatalf("Close still waits %v after it was called, with a cell running", time.Since(t0))
	}
	select {
	case err := <-ended:
		if err == nil {
			t.Errorf("the call in flight ended without an error")
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the call in flight did not end after Close")
	}
	r2, err := ipybox.Dial(t.Context(), "", &ipybox.RemoteOptions{Transport: ct2(t, srv)})
	if err != nil {
		t.Fatal(err)
	}
	defer r2.Close()
	if res, err := r2.Session(s.Handle()).Execute(t.Context(), "print(x + 1)", nil); err != nil || !strings.HasSuffix(res.Text, "42") {
		t.Errorf("the session after Close: %v %+v", err, res)
	}
}

// ct2 serves srv on a new in-memory connection and returns its client end.
func ct2(t *testing.T, srv *mcpserver.Server) mcp.Transport {
	ct, st := mcp.NewInMemoryTransports()
	go srv.Serve(context.Background(), st)
	return ct
}

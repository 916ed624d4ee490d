package ipybox_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ipybox/ipybox"
)

// TestNilApproverRejects: an Executor without an Approver rejects, in
// Execute, every tool call and shell command that needs approval; the
// named opt-out accepts them.
func TestNilApproverRejects(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	mark := filepath.Join(t.TempDir(), "shell-ran")
	for _, tc := range []struct {
		name     string
		approver func(context.Context, *ipybox.ApprovalRequest) error
		wantRan  bool
	}{
		{"nil approver", nil, false},
		{"ApproveAll", ipybox.ApproveAll, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			os.Remove(mark)
			ex := start(t, &ipybox.Options{Approver: tc.approver, ApproveShellCommands: true})
			register(t, ex, "go", testmcpStdio(t))
			res, err := ex.Execute(ctx, "from mcptools.go.tool_1 import Params, run\nprint(run(Params(s='x')))", nil)
			var pe *ipybox.PythonError
			switch {
			case tc.wantRan && err != nil:
				t.Errorf("tool call with %s: %v", tc.name, err)
			case !tc.wantRan && (!errors.As(err, &pe) || pe.Name != "ApprovalRejectedError" || !strings.Contains(pe.Value, "no Options.Approver is set")):
				t.Errorf("tool call with %s: err = %v (result %+v), want ApprovalRejectedError naming Options.Approver", tc.name, err, res)
			}
			_, err = ex.Execute(ctx, "!touch "+mark, nil)
			_, statErr := os.Stat(mark)
			if ran := statErr == nil; ran != tc.wantRan {
				t.Errorf("shell command with %s: ran = %v (err %v), want %v", tc.name, ran, err, tc.wantRan)
			}
		})
	}
}

// TestApprovalRequestZeroValue: deciding a request that Stream did not
// yield, or deciding twice, returns an error instead of blocking.
func TestApprovalRequestZeroValue(t *testing.T) {
	t.Parallel()
	var r ipybox.ApprovalRequest
	done := make(chan error, 2)
	go func() {
		done <- r.Accept()
		done <- (&ipybox.ApprovalRequest{}).Reject("no")
	}()
	for i := 0; i < 2; i++ {
		if err := <-done; !errors.Is(err, ipybox.ErrNotPending) {
			t.Errorf("decision %d on a zero request: %v, want ErrNotPending", i, err)
		}
	}

	ex := start(t, &ipybox.Options{ApproveShellCommands: true})
	var second error
	for ev, err := range ex.Stream(context.Background(), "!true", nil) {
		if err != nil {
			t.Fatal(err)
		}
		if r, ok := ev.(*ipybox.ApprovalRequest); ok {
			if err := r.Accept(); err != nil {
				t.Errorf("first Accept: %v", err)
			}
			second = r.Reject("too late")
		}
	}
	if !errors.Is(second, ipybox.ErrNotPending) {
		t.Errorf("a second decision = %v, want ErrNotPending", second)
	}
}

package ipybox_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/ipybox/ipybox"
	"github.com/ipybox/ipybox/internal/kernel"
	"github.com/ipybox/ipybox/internal/mcpconn"
	"github.com/ipybox/ipybox/mcpserver"
)

// TestNegativeDurations: every options struct follows one rule, zero means
// the default and a negative duration is an error that names the field and
// says what to use instead.
func TestNegativeDurations(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cases := []struct {
		field string
		call  func() error
	}{
		{"Options.InitTimeout", func() error {
			_, err := ipybox.Start(ctx, &ipybox.Options{InitTimeout: -time.Second, WorkDir: t.TempDir()})
			return err
		}},
		{"Options.ApprovalTimeout", func() error {
			_, err := ipybox.Start(ctx, &ipybox.Options{ApprovalTimeout: -time.Second, WorkDir: t.TempDir()})
			return err
		}},
		{"Options.ShutdownGrace", func() error {
			_, err := kernel.Start(ctx, &kernel.Options{ShutdownGrace: -time.Second, Dir: t.TempDir()})
			return err
		}},
		{"Options.HeartbeatInterval", func() error {
			_, err := kernel.Start(ctx, &kernel.Options{HeartbeatInterval: -time.Second, Dir: t.TempDir()})
			return err
		}},
		{"Options.CallTimeout", func() error {
			_, err := mcpconn.New(mcpconn.NewRegistry(), &mcpconn.Options{CallTimeout: -time.Second})
			return err
		}},
		{"Options.HTTP.SessionIdleTimeout", func() error {
			_, err := mcpserver.New(&mcpserver.Options{Workspace: t.TempDir(), HTTP: mcpserver.HTTPOptions{SessionIdleTimeout: -time.Second}})
			return err
		}},
	}
	for _, c := range cases {
		t.Run(c.field, func(t *testing.T) {
			err := c.call()
			if err == nil || !strings.Contains(err.Error(), c.field+" is -1s") || !strings.Contains(err.Error(), "or 0 for the default") {
				t.Errorf("got %v, want an error naming %s and the default", err, c.field)
			}
		})
	}
	t.Run("ExecOptions.Timeout", func(t *testing.T) {
		ex := start(t, nil)
		_, err := ex.Execute(ctx, "1", &ipybox.ExecOptions{Timeout: -time.Second})
		if err == nil || !strings.Contains(err.Error(), "ExecOptions.Timeout is -1s") {
			t.Errorf("got %v, want an error naming ExecOptions.Timeout", err)
		}
	})
}

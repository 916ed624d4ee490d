package kernel_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ipybox/ipybox/internal/kernel"
)

// TestTCPTransport runs a real kernel over TCP on 127.0.0.1, the transport
// Windows uses, here where ipc would be the default: execute, interrupt a
// running cell, and restart.
func TestTCPTransport(t *testing.T) {
	t.Parallel()
	var o kernel.Options
	kernel.UseTCP(&o)
	o.InterruptGrace = 10 * time.Second
	k := startKernel(t, &o)
	ctx := context.Background()

	b, err := os.ReadFile(filepath.Join(k.RunDir(), "kernel", "kernel.json"))
	if err != nil {
		t.Fatal(err)
	}
	var info struct {
		Transport string `json:"transport"`
		IP        string `json:"ip"`
		ShellPort int    `json:"shell_port"`
		Key       string `json:"key"`
	}
	if err := json.Unmarshal(b, &info); err != nil {
		t.Fatal(err)
	}
	if info.Transport != "tcp" || info.IP != "127.0.0.1" || info.ShellPort == 0 || len(info.Key) < 32 {
		t.Fatalf("connection file: %s, want tcp on 127.0.0.1 with a key", b)
	}
	if m, _ := filepath.Glob(filepath.Join(k.RunDir(), "kernel", "k-*")); len(m) > 0 {
		t.Errorf("ipc socket files with the tcp transport: %v", m)
	}

	res, err := k.Execute(ctx, "print('over tcp')\n6 * 7", nil)
	if err != nil || res.Text != "over tcp\n42" {
		t.Fatalf("execute: %v, %q", err, res.Text)
	}

	errc := make(chan error, 1)
	var once sync.Once
	go func() {
		_, err := k.Execute(ctx, sleepCell, &kernel.ExecOptions{
			OnEvent: func(e kernel.Event) {
				if s, ok := e.(*kernel.Output); ok && strings.Contains(s.Text, "sleeping") {
					once.Do(func() { k.Interrupt() })
				}
			},
		})
		errc <- err
	}()
	select {
	case err := <-errc:
		var pe *kernel.PythonError
		if !errors.As(err, &pe) || pe.Name != "KeyboardInterrupt" {
			t.Fatalf("interrupted cell: %v, want KeyboardInterrupt", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the interrupt did not stop the cell within 20s")
	}

	pid := k.Pid()
	if err := k.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	if k.Pid() == pid {
		t.Error("Restart kept the process")
	}
	if res, err := k.Execute(ctx, "1 + 1", nil); err != nil || res.Text != "2" {
		t.Fatalf("after restart: %v, %+v", err, res)
	}
}

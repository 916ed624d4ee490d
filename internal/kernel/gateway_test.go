package kernel_test

import (
	"context"
	"errors"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ipybox/ipybox/internal/gateway"
	"github.com/ipybox/ipybox/internal/jupyter"
	"github.com/ipybox/ipybox/internal/kernel"
	"github.com/ipybox/ipybox/internal/testenv"
)

// gatewayKinds are the two framings, each against a Jupyter Server that
// speaks it: one that picks the v1 subprotocol, one forced to legacy.
var gatewayKinds = []struct {
	name   string
	legacy bool
}{{"v1", false}, {"legacy", true}}

// remoteKernels lists the server's kernels. Jupyter Server can fail the
// list with a 500 while a kernel is being started or removed (as after a
// cancelled start); the callers poll, so a failed list counts as not yet.
func remoteKernels(t *testing.T, j *testenv.Jupyter) ([]gateway.KernelModel, error) {
	t.Helper()
	c, err := gateway.New(gateway.Config{URL: j.URL, Token: j.Token})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return c.Kernels(ctx)
}

// waitNoKernels fails t unless the server has no kernel left, soon.
func waitNoKernels(t *testing.T, j *testenv.Jupyter, when string) {
	t.Helper()
	waitKernelCount(t, j, 0, when+": the server still has kernels")
}

// waitKernelCount waits until the server lists n kernels, and fails t with
// what if it does not within 20 s.
func waitKernelCount(t *testing.T, j *testenv.Jupyter, n int, what string) {
	t.Helper()
	var ks []gateway.KernelModel
	var err error
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if ks, err = remoteKernels(t, j); err == nil && len(ks) == n {
			return
		}
	}
	if err != nil {
		t.Errorf("%s: listing the kernels: %v\nserver log:\n%s", what, err, j.Log)
		return
	}
	t.Errorf("%s: %d kernels %+v, want %d", what, len(ks), ks, n)
}

func startGatewayKernel(t *testing.T, j *testenv.Jupyter, o kernel.Options) *kernel.Kernel {
	t.Helper()
	o.Gateway = &kernel.GatewayConfig{URL: j.URL, Token: j.Token}
	if o.Dir == "" {
		o.Dir = t.TempDir()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	k, err := kernel.Start(ctx, &o)
	if err != nil {
		t.Fatalf("start on the gateway: %v\nserver log:\n%s", err, j.Log)
	}
	t.Cleanup(func() { k.Close() })
	return k
}

// TestGatewayKernel runs the kernel behaviour suite on a kernel of a real
// Jupyter Server, over the v1 and the legacy protocol.
func TestGatewayKernel(t *testing.T) {
	for _, kind := range gatewayKinds {
		t.Run(kind.name, func(t *testing.T) {
			// The framings run side by side, each with a server and a
			// kernel of its own, and nothing else beside them: the test
			// itself is not parallel, because "streaming" measures how
			// soon output arrives.
			t.Parallel()
			j := testenv.JupyterServer(t, &testenv.JupyterServerOptions{Legacy: kind.legacy})
			ctx := context.Background()
			images := t.TempDir()
			k := startGatewayKernel(t, j, kernel.Options{
				ImagesDir: images,
				Env:       []string{"IPYBOX_TEST_VAR=from-the-host", "KERNEL_TEST=kv"},
				InitCode:  "_ipybox_init_ran = True",
			})
			if k.RemoteID() == "" {
				t.Fatal("no remote kernel id")
			}
			run := func(code string, o *kernel.ExecOptions) (*kernel.Result, error) {
				t.Helper()
				cctx, cancel := context.WithTimeout(ctx, 60*time.Second)
				defer cancel()
				return k.Execute(cctx, code, o)
			}
			must := func(code string) string {
				t.Helper()
				res, err := run(code, nil)
				if err != nil {
					t.Fatalf("%q: %v", code, err)
				}
				return res.Text
			}

			t.Run("the server's framing is the one spoken", func(t *testing.T) {
				c, _ := gateway.New(gateway.Config{URL: j.URL, Token: j.Token})
				conn, err := c.Connect(ctx, k.RemoteID(), func(jupyter.Channel, *jupyter.Message) {}, nil)
				if err != nil {
					t.Fatal(err)
				}
				defer conn.Close()
				want := gateway.SubprotocolV1
				if kind.legacy {
					want = "legacy"
				}
				if conn.Protocol() != want {
					t.Errorf("protocol = %s, want %s", conn.Protocol(), want)
				}
			})
			t.Run("state and streams", func(t *testing.T) {
				must("x = 6 * 7")
				if got := must("import sys\nprint(x)\nprint('err', file=sys.stderr)\nx + 1"); got != "42\nerr\n43" {
					t.Errorf("text = %q", got)
				}
				if got := must("_ipybox_init_ran"); got != "True" {
					t.Errorf("init code: %q", got)
				}
			})
			t.Run("env reaches the kernel, the gateway token does not", func(t *testing.T) {
				got := must("import os\nprint(os.environ.get('IPYBOX_TEST_VAR'), os.environ.get('KERNEL_TEST'))\nprint(any(" + pyStr(j.Token) + " in v for v in os.environ.values()))")
				if got != "from-the-host kv\nFalse" {
					t.Errorf("env: %q", got)
				}
			})
			t.Run("python error", func(t *testing.T) {
				_, err := run("1/0", nil)
				var pe *kernel.PythonError
				if !errors.As(err, &pe) || pe.Name != "ZeroDivisionError" {
					t.Fatalf("err = %v", err)
				}
			})
			t.Run("streaming", func(t *testing.T) {
				var mu sync.Mutex
				var first time.Time
				begin := time.Now()
				_, err := run("import time\nprint('a', flush=True)\ntime.sleep(1)\nprint('b')", &kernel.ExecOptions{
					OnEvent: func(e kernel.Event) {
						mu.Lock()
						defer mu.Unlock()
						if o, ok := e.(*kernel.Output); ok && strings.Contains(o.Text, "a") && first.IsZero() {
							first = time.Now()
						}
					},
				})
				if err != nil {
					t.Fatal(err)
				}
				if first.IsZero() || first.Sub(begin) > 900*time.Millisecond {
					t.Errorf("the first output arrived after %v, not while the cell ran", first.Sub(begin))
				}
			})
			t.Run("images are saved on the host", func(t *testing.T) {
				res, err := run("from IPython.display import Image, display\nimport base64\n"+
					"display(Image(data=base64.b64decode('iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==')))", nil)
				if err != nil {
					t.Fatal(err)
				}
				if len(res.Images) != 1 || !strings.HasPrefix(res.Images[0], images) {
					t.Fatalf("images = %v", res.Images)
				}
				if b, err := os.ReadFile(res.Images[0]); err != nil || !strings.HasPrefix(string(b), "\x89PNG") {
					t.Errorf("image file: %v", err)
				}
			})
			t.Run("input", func(t *testing.T) {
				res, err := run("print(input('name? '))", &kernel.ExecOptions{
					Input: func(_ context.Context, prompt string, _ bool) (string, error) { return "ada:" + prompt, nil },
				})
				if err != nil || res.Text != "ada:name? " {
					t.Errorf("input: %v, %+v", err, res)
				}
			})
			t.Run("timeout interrupts and keeps state", func(t *testing.T) {
				must("kept = 1")
				begin := time.Now()
				_, err := run("import time\ntime.sleep(30)", &kernel.ExecOptions{Timeout: 500 * time.Millisecond})
				var te *kernel.TimeoutError
				if !errors.As(err, &te) || te.Restarted {
					t.Fatalf("err = %v", err)
				}
				if d := time.Since(begin); d > 5*time.Second {
					t.Errorf("the timeout took %v", d)
				}
				if got := must("kept"); got != "1" {
					t.Errorf("state after the interrupt: %q", got)
				}
			})
			t.Run("a cell that ignores SIGINT is restarted", func(t *testing.T) {
				id := k.RemoteID()
				_, err := run("import signal, time\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\ntime.sleep(60)", &kernel.ExecOptions{Timeout: 300 * time.Millisecond})
				var te *kernel.TimeoutError
				if !errors.As(err, &te) || !te.Restarted {
					t.Fatalf("err = %v, want a TimeoutError with Restarted", err)
				}
				if k.RemoteID() == id {
					t.Error("the kernel was not replaced")
				}
				if got := must("'kept' in globals()"); got != "False" {
					t.Errorf("state after the restart: %q", got)
				}
				waitKernels(t, j, 1)
			})
			t.Run("10 MB of output", func(t *testing.T) {
				res, err := run("import sys\nfor i in range(100000): sys.stdout.write('x' * 99 + '\\n')", nil)
				if err != nil {
					t.Fatal(err)
				}
				if len(res.Text) != 100000*100-1 || res.Truncated {
					t.Errorf("got %d bytes (truncated %v)", len(res.Text), res.Truncated)
				}
			})
			t.Run("reset", func(t *testing.T) {
				must("y = 1")
				if err := k.Restart(ctx); err != nil {
					t.Fatal(err)
				}
				if got := must("'y' in globals()"); got != "False" {
					t.Errorf("after Restart: %q", got)
				}
				waitKernels(t, j, 1)
			})
			t.Run("death is reported and the next call recovers", func(t *testing.T) {
				must("z = 1")
				_, err := run("import os\nos._exit(1)", nil)
				if !errors.Is(err, kernel.ErrKernelDied) {
					t.Fatalf("err = %v, want ErrKernelDied", err)
				}
				t.Logf("death: %v", err)
				if got := must("'z' in globals()"); got != "False" {
					t.Errorf("after death: %q", got)
				}
				waitKernels(t, j, 1)
			})
			t.Run("a culled kernel is reported like a death", func(t *testing.T) {
				must("w = 1")
				c, _ := gateway.New(gateway.Config{URL: j.URL, Token: j.Token})
				if err := c.Delete(ctx, k.RemoteID()); err != nil {
					t.Fatal(err)
				}
				waitDead(t, k)
				res, err := run("'w' in globals()", nil)
				if err != nil || res.Text != "False" || res.Restarted == nil {
					t.Fatalf("after the cull: %v, %+v", err, res)
				}
				t.Logf("reported: %v", res.Restarted)
			})
			k.Close()
			waitNoKernels(t, j, "after Close")
		})
	}
}

// waitKernels waits until the server has n kernels (an old one's DELETE
// may still be under way).
func waitKernels(t *testing.T, j *testenv.Jupyter, n int) {
	t.Helper()
	waitKernelCount(t, j, n, "an old kernel was left behind")
}

func pyStr(s string) string { return "'" + s + "'" }

// TestGatewayLifecycle: a wrong token is a clear error without the token;
// a cancelled start and Close leave no kernel on the server; a server that
// goes away mid-cell gives a clear error, not a hang.
func TestGatewayLifecycle(t *testing.T) {
	testenv.CheckGoroutines(t)
	j := testenv.JupyterServer(t, nil)
	http.DefaultClient.CloseIdleConnections()

	t.Run("wrong token", func(t *testing.T) {
		secret := "wrong-token-3f9a"
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, err := kernel.Start(ctx, &kernel.Options{Gateway: &kernel.GatewayConfig{URL: j.URL, Token: secret}})
		if err == nil || !strings.Contains(err.Error(), "403") && !strings.Contains(err.Error(), "401") || !strings.Contains(err.Error(), "token") {
			t.Fatalf("err = %v, want a clear refusal", err)
		}
		t.Logf("wrong token: %v", err)
		if strings.Contains(err.Error(), secret) {
			t.Errorf("the error holds the token: %v", err)
		}
	})

	t.Run("cancelled start", func(t *testing.T) {
		for _, after := range []time.Duration{time.Millisecond, 50 * time.Millisecond, 300 * time.Millisecond} {
			ctx, cancel := context.WithTimeout(context.Background(), after)
			k, err := kernel.Start(ctx, &kernel.Options{Gateway: &kernel.GatewayConfig{URL: j.URL, Token: j.Token}})
			cancel()
			if err == nil {
				// A fast stack (PyPI's Jupyter Server 2 and ipykernel 7)
				// may start a kernel within the longer bounds: what must
				// hold then is that none is left behind (below).
				k.Close()
				if after == time.Millisecond {
					t.Errorf("a start cancelled after %v succeeded", after)
				}
				t.Logf("a start with %v succeeded before its cancellation", after)
			} else {
				t.Logf("cancelled after %v: %v", after, err)
			}
		}
		waitNoKernels(t, j, "after cancelled starts")
	})

	t.Run("server goes away mid-cell", func(t *testing.T) {
		k := startGatewayKernel(t, j, kernel.Options{HeartbeatInterval: 200 * time.Millisecond})
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		// Stop the server once the cell runs.
		var begin time.Time
		var once sync.Once
		_, err := k.Execute(ctx, "import time\nprint('running', flush=True)\ntime.sleep(20)", &kernel.ExecOptions{OnEvent: func(e kernel.Event) {
			if o, ok := e.(*kernel.Output); ok && strings.Contains(o.Text, "running") {
				once.Do(func() {
					begin = time.Now()
					go j.Stop()
				})
			}
		}})
		if !errors.Is(err, kernel.ErrKernelDied) {
			t.Fatalf("err = %v, want ErrKernelDied", err)
		}
		if d := time.Since(begin); d > 5*time.Second {
			t.Errorf("noticed after %v", d)
		}
		t.Logf("err: %v", err)
		closeBegin := time.Now()
		k.Close()
		if d := time.Since(closeBegin); d > 10*time.Second {
			t.Errorf("Close took %v with the server gone", d)
		}
	})
}

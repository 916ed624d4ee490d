package ipybox_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ipybox/ipybox"
	"github.com/ipybox/ipybox/internal/testenv"
)

// TestEnterpriseGateway runs an Executor whose kernel Jupyter Enterprise
// Gateway 3.3.0 (PyPI) starts through its local process proxy: state, a
// matplotlib plot saved on the host, MCP tool calls that wait for the
// host's approval (one rejected, one accepted), an interrupt that keeps
// the kernel's state, and a restart (Reset) that does not. The
// front-end restarts and second front ends are in cmd/ipybox and
// mcpserver (TestMCPDurableRestart, TestGatewaySecondFrontEnd).
func TestEnterpriseGateway(t *testing.T) {
	t.Parallel()
	j := testenv.EnterpriseGateway(t)
	ex := start(t, &ipybox.Options{Gateway: &ipybox.GatewayConfig{URL: j.URL, Token: j.Token}})
	if got := run(t, ex, "x = 2\nprint(x * 21)").Text; got != "42" {
		t.Errorf("text = %q", got)
	}
	res := run(t, ex, "import matplotlib\nmatplotlib.use('module://matplotlib_inline.backend_inline')\n"+
		"import matplotlib.pyplot as plt\nplt.plot([1, 3, 2])\nplt.show()")
	if len(res.Images) != 1 || !strings.HasSuffix(res.Images[0], ".png") {
		t.Errorf("plot: images = %v", res.Images)
	}

	register(t, ex, "go", testmcpStdio(t))
	imports := "from mcptools.go.tool_1 import Params, run\n"
	_, _, err := collect(t, ex, imports+"run(Params(s='x'))", nil, func(r *ipybox.ApprovalRequest) { r.Reject("not today") })
	var pe *ipybox.PythonError
	if !errors.As(err, &pe) || pe.Name != "ApprovalRejectedError" {
		t.Fatalf("rejected call: err = %v", err)
	}
	reqs, events, err := collect(t, ex, imports+"print(run(Params(s='1')))", nil, nil)
	if err != nil || len(reqs) != 1 || resultText(events) != "tool-1: 1" {
		t.Fatalf("approved call: %v, %d requests, %q", err, len(reqs), resultText(events))
	}

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	_, err = ex.Execute(ctx, "import time\ntime.sleep(60)", &ipybox.ExecOptions{Timeout: time.Second})
	if !errors.Is(err, ipybox.ErrTimeout) {
		t.Errorf("interrupt: %v", err)
	}
	if got := run(t, ex, "x").Text; got != "2" {
		t.Errorf("state after the interrupt: %q", got)
	}
	id := ex.KernelID()
	if err := ex.Reset(ctx); err != nil {
		t.Fatal(err)
	}
	if ex.KernelID() == id {
		t.Error("Reset kept the gateway kernel")
	}
	if got := run(t, ex, "'x' in globals()").Text; got != "False" {
		t.Errorf("state after Reset: %q", got)
	}
}

// TestGatewayFigures measures, side by side, a local kernel, Jupyter
// Server (the kernel stack under test) and Enterprise Gateway 3.3.0's
// local process proxy: the Executor's start (kernel start, handshake and
// init code), the round trip of a `pass` cell (median of 20), and an
// approved tool call (median of 5). The figures are logged for
// docs/scale.md; the test fails only when a run fails.
func TestGatewayFigures(t *testing.T) {
	t.Parallel()
	cfg := testmcpStdio(t)
	for _, kind := range []string{"local", "jupyter-server", "enterprise-gateway"} {
		t.Run(kind, func(t *testing.T) {
			o := &ipybox.Options{}
			switch kind {
			case "jupyter-server":
				j := testenv.JupyterServer(t, nil)
				o.Gateway = &ipybox.GatewayConfig{URL: j.URL, Token: j.Token}
			case "enterprise-gateway":
				j := testenv.EnterpriseGateway(t)
				o.Gateway = &ipybox.GatewayConfig{URL: j.URL, Token: j.Token}
			default:
				testenv.NeedsPython(t)
			}
			t0 := time.Now()
			ex := start(t, o)
			run(t, ex, "pass")
			startTook := time.Since(t0)
			median := func(n int, f func()) time.Duration {
				var ds []time.Duration
				for range n {
					t0 := time.Now()
					f()
					ds = append(ds, time.Since(t0))
				}
				slices.Sort(ds)
				return ds[n/2]
			}
			cell := median(20, func() { run(t, ex, "pass") })
			register(t, ex, "go", cfg)
			run(t, ex, "from mcptools.go.tool_1 import Params, run as tool")
			call := median(5, func() {
				if _, events, err := collect(t, ex, "print(tool(Params(s='1')))", nil, nil); err != nil || resultText(events) != "tool-1: 1" {
					t.Fatalf("tool call: %v %q", err, resultText(events))
				}
			})
			t.Logf("FIGURES %s: start %v, pass cell %v, approved tool call %v", kind,
				startTook.Round(time.Millisecond), cell.Round(100*time.Microsecond), call.Round(100*time.Microsecond))
		})
	}
}

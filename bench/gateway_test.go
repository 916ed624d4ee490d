//go:build unix

package bench

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/ipybox/ipybox"
	"github.com/ipybox/ipybox/internal/testenv"
)

// gwAnchor runs a gateway mode of bench/anchor.py against j; the token
// goes through the environment, as ipybox's does.
func gwAnchor(b *testing.B, j *testenv.Jupyter, args ...string) map[string]any {
	b.Helper()
	py := "/usr/bin/python3"
	if out, err := exec.Command(py, "-c", "import websocket").CombinedOutput(); err != nil {
		testenv.Missing(b, "python3-websocket for the gateway anchor (scripts/setup.sh): %s", out)
	}
	cmd := exec.Command(py, append([]string{"anchor.py"}, args...)...)
	cmd.Env = append(os.Environ(), "JUPYTER_GATEWAY_AUTH_TOKEN="+j.Token)
	out, err := cmd.Output()
	if err != nil {
		b.Fatalf("anchor %v: %v", args, err)
	}
	var v map[string]any
	if err := json.Unmarshal(out, &v); err != nil {
		b.Fatalf("anchor %v: %q: %v", args, out, err)
	}
	return v
}

// gatewayExecutor starts a Jupyter Server and an Executor whose kernel
// lives on it, closed when b ends.
func gatewayExecutor(b *testing.B) (*testenv.Jupyter, *ipybox.Executor) {
	j := testenv.JupyterServer(b, nil)
	ex, err := ipybox.Start(context.Background(), &ipybox.Options{WorkDir: b.TempDir(), Gateway: &ipybox.GatewayConfig{URL: j.URL, Token: j.Token}})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { ex.Close() })
	return j, ex
}

// BenchmarkGatewayPass is the `pass` round trip of an Executor whose
// kernel lives on a Jupyter Server on loopback, beside a Python websocket
// client on a kernel of the same server and jupyter_client's
// BlockingKernelClient on a local kernel, in the same run. Target: within
// 1.5 ms of the local round trip.
func BenchmarkGatewayPass(b *testing.B) {
	j, ex := gatewayExecutor(b)
	ctx := context.Background()
	n := max(b.N, 200)
	ours := passP50(b, ctx, ex, n)
	ws := gwAnchor(b, j, "gw-roundtrip", j.URL, strconv.Itoa(n))["p50_ms"].(float64)
	local := anchor(b, "roundtrip", strconv.Itoa(n))["p50_ms"].(float64)
	b.ReportMetric(ours, "p50-ms")
	b.ReportMetric(ws, "anchor-ws-p50-ms")
	b.ReportMetric(local, "anchor-local-p50-ms")
	b.ReportMetric(ours/ws, "ratio-ws")
	b.ReportMetric(ours-local, "over-local-ms")
	b.Logf("pass round trip p50: ipybox over the gateway %.2f ms; Python websocket client on the same server %.2f ms (ratio %.2f); jupyter_client on a local kernel %.2f ms (ipybox +%.2f ms, target <= 1.5)",
		ours, ws, ours/ws, local, ours-local)
}

// BenchmarkGatewayStart is start to first result through the gateway
// (POST /api/kernels, channels, init, execute "1"), beside the Python
// websocket client doing the same against the same server.
func BenchmarkGatewayStart(b *testing.B) {
	j := testenv.JupyterServer(b, nil)
	ctx := context.Background()
	var ours, theirs []float64
	for range b.N {
		t0 := time.Now()
		ex, err := ipybox.Start(ctx, &ipybox.Options{WorkDir: b.TempDir(), Gateway: &ipybox.GatewayConfig{URL: j.URL, Token: j.Token}})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := ex.Execute(ctx, "1", nil); err != nil {
			b.Fatal(err)
		}
		ours = append(ours, ms(time.Since(t0)))
		ex.Close()
		theirs = append(theirs, gwAnchor(b, j, "gw-start", j.URL)["ms"].(float64))
	}
	o, a := median(ours), median(theirs)
	b.ReportMetric(o, "ms")
	b.ReportMetric(a, "anchor-ms")
	b.ReportMetric(o/a, "ratio")
	b.Logf("start to first result through the gateway (median of %d): ipybox %.0f ms, Python websocket client %.0f ms, ratio %.2f", b.N, o, a, o/a)
}

// BenchmarkGatewayTransfer moves 64 MiB up to a gateway kernel and back
// with Executor.UploadFile and DownloadFile (silent cells over the
// channel), beside a Python client moving the same amount through the
// server's contents API, in the same run.
func BenchmarkGatewayTransfer(b *testing.B) {
	const mb = 64
	j, ex := gatewayExecutor(b)
	ctx := context.Background()
	data := make([]byte, mb<<20)
	rand.Read(data)
	var ups, downs, aups, adowns []float64
	for range max(b.N, 3) {
		t0 := time.Now()
		if _, err := ex.UploadFile(ctx, "bench.bin", bytes.NewReader(data)); err != nil {
			b.Fatal(err)
		}
		ups = append(ups, ms(time.Since(t0)))
		var buf bytes.Buffer
		t0 = time.Now()
		if _, err := ex.DownloadFile(ctx, "bench.bin", &buf); err != nil || !bytes.Equal(buf.Bytes(), data) {
			b.Fatalf("download: %v (equal %v)", err, bytes.Equal(buf.Bytes(), data))
		}
		downs = append(downs, ms(time.Since(t0)))
		a := gwAnchor(b, j, "gw-contents", j.URL, strconv.Itoa(mb))
		aups = append(aups, a["up_ms"].(float64))
		adowns = append(adowns, a["down_ms"].(float64))
	}
	u, d, au, ad := median(ups), median(downs), median(aups), median(adowns)
	b.ReportMetric(u, "up-ms")
	b.ReportMetric(d, "down-ms")
	b.ReportMetric(au, "anchor-up-ms")
	b.ReportMetric(ad, "anchor-down-ms")
	b.Logf("%d MiB through the gateway (median of %d): upload %.0f ms, download %.0f ms; Python through the contents API: up %.0f ms, down %.0f ms (ratios %.2f, %.2f)",
		mb, len(ups), u, d, au, ad, u/au, d/ad)
}

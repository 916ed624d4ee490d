package kernel_test

import (
	"context"
	"testing"
	"time"

	"github.com/ipybox/ipybox/internal/kernel"
	"github.com/ipybox/ipybox/internal/testenv"
)

// TestGatewayHeavyOutputKeepsKernel prints heavily from a kernel of a real
// Jupyter Server for several times the heartbeat's death timeout (3 beats,
// shortened to 300 ms so that the server's own 90 s ping timeout, which a
// host slowed by -race can reach under a long backlog, stays out of
// reach): the kernel must not be declared dead, and its state must
// survive.
// Before, ipykernel's unbounded stream buffer left as messages of over
// 128 MiB (the connection was dropped), and a pong queued behind a long
// message missed its beat. The cell writes at most 25 MB/s: unthrottled,
// it wrote some hundreds of megabytes in its 2 s, which the Jupyter
// Server, a Python process, took 20-60 s to relay on a loaded 2-core CI
// machine under -race, and three 300 ms beats in that time could find
// it silent (CI run 21).
func TestGatewayHeavyOutputKeepsKernel(t *testing.T) {
	j := testenv.JupyterServer(t, nil)
	k := startGatewayKernel(t, j, kernel.Options{HeartbeatInterval: 300 * time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	if _, err := k.Execute(ctx, "state = 41 + 1", nil); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err := k.Execute(ctx, `import time, sys
t0 = time.time()
line = 'x' * 2000 + '\n'
while time.time() - t0 < 2:
    sys.stdout.write(line * 50)
    time.sleep(0.004)
`, &kernel.ExecOptions{KeepText: 4096})
	t.Logf("the printing cell took %v", time.Since(start))
	if err != nil {
		t.Fatalf("heavy output: %v\nserver log:\n%s", err, j.Log)
	}
	res, err := k.Execute(ctx, "print(state)", nil)
	if err != nil || res.Text != "42" || res.Restarted != nil {
		t.Fatalf("after heavy output: %q, %v, restarted %v: the kernel's state is lost", res.Text, err, res.Restarted)
	}
}

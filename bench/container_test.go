//go:build unix

package bench

import (
	"os"
	"testing"

	"github.com/ipybox/ipybox"
	"github.com/ipybox/ipybox/internal/container"
	"github.com/ipybox/ipybox/internal/testenv"
)

// containerOptions is the container of the "start-container" child, whose
// workspace is ws (given to the kernel's user under root).
func containerOptions(ws string) *ipybox.ContainerConfig {
	if os.Geteuid() == 0 {
		os.Chown(ws, container.MappedID, container.MappedID)
	}
	return &ipybox.ContainerConfig{Image: testenv.TestImage()}
}

// BenchmarkContainerStart is start to first result with the kernel in a
// Docker container, beside the bwrap sandbox and the unsandboxed start,
// alternating in one run, each in a fresh process. Target: at most 1.5 s.
func BenchmarkContainerStart(b *testing.B) {
	testenv.NeedsPython(b)
	testenv.NeedsDocker(b)
	testenv.NeedsTool(b, "bwrap")
	var plain, boxed, ctr []float64
	childRun(b, "start-container") // the first container start warms the daemon's caches
	for range b.N {
		plain = append(plain, childRun(b, "start")["ms"])
		boxed = append(boxed, childRun(b, "start-sandbox")["ms"])
		ctr = append(ctr, childRun(b, "start-container")["ms"])
	}
	p, s, c := median(plain), median(boxed), median(ctr)
	b.ReportMetric(c, "container-ms")
	b.ReportMetric(s, "sandboxed-ms")
	b.ReportMetric(p, "plain-ms")
	b.ReportMetric(c/p, "ratio")
	b.Logf("start to first result (median of %d): container %.0f ms, sandboxed %.0f ms, unsandboxed %.0f ms; container/unsandboxed %.2f (target: container <= 1500 ms)", b.N, c, s, p, c/p)
}

// BenchmarkContainerPoolStart is start to first result from a warm Pool of
// container Executors: Get, then the first Execute. Target: under 50 ms,
// as for local kernels.
func BenchmarkContainerPoolStart(b *testing.B) {
	testenv.NeedsDocker(b)
	ws := b.TempDir()
	benchWarmPool(b, "container ", &ipybox.Options{WorkDir: ws, Container: containerOptions(ws)})
}

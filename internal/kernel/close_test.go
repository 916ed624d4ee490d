package kernel_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/ipybox/ipybox/internal/kernel"
	"github.com/ipybox/ipybox/internal/testenv"
)

// TestCloseIsFast closes 50 kernels that have just run a cell and fails on
// any Close over 500 ms. ipykernel 6.17 can hang for up to 10 s after its
// shutdown_reply (a race between its control and IOPub threads, frequent
// with history off, as here); Close must not wait for that.
func TestCloseIsFast(t *testing.T) {
	py := testenv.NeedsPython(t)
	const n, workers = 50, 4
	var (
		mu      sync.Mutex
		times   []time.Duration
		retries []time.Duration // slow closes measured again
	)
	jobs := make(chan int)
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range jobs {
				// A slow Close is measured again, up to twice: on a
				// machine busy with other tests, a kernel may take that
				// long to answer. The wait this test guards against
				// (ShutdownGrace, in one Close of four) shows again.
				var d time.Duration
				for try := range 3 {
					var ok bool
					if d, ok = measureClose(t, py); !ok || d <= 500*time.Millisecond {
						break
					}
					if try < 2 {
						mu.Lock()
						retries = append(retries, d)
						mu.Unlock()
					}
				}
				mu.Lock()
				times = append(times, d)
				mu.Unlock()
			}
		}()
	}
	for i := range n {
		jobs <- i
	}
	close(jobs)
	wg.Wait()
	slices.Sort(times)
	if len(times) == 0 {
		t.Fatal("no kernel closed")
	}
	t.Logf("%d closes: median %v, max %v; %d slow ones measured again (%v)", len(times), times[len(times)/2], times[len(times)-1], len(retries), retries)
	for _, d := range times {
		if d > 500*time.Millisecond {
			t.Errorf("a Close took %v three times over (want every one under 500 ms); all: %v", d, times)
			break
		}
	}
	if len(retries) > n/10 {
		t.Errorf("%d of %d closes over 500 ms at first (%v); want at most %d", len(retries), n, retries, n/10)
	}
}

// measureClose starts a kernel, runs a cell, and times its Close.
func measureClose(t *testing.T, py string) (time.Duration, bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	k, err := kernel.Start(ctx, &kernel.Options{Python: py, Dir: t.TempDir()})
	if err != nil {
		t.Error(err)
		return 0, false
	}
	if _, err := k.Execute(ctx, "import sys\nprint('x' * 1000)\nsys.stderr.write('e')", nil); err != nil {
		t.Error(err)
	}
	t0 := time.Now()
	if err := k.Close(); err != nil {
		t.Error(err)
	}
	return time.Since(t0), true
}

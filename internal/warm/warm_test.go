package warm

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ipybox/ipybox/internal/testenv"
)

// waitReady waits (bounded) until p holds n values.
func waitReady[T any](t *testing.T, p *Pool[T], n int) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); p.Ready() != n; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the pool holds %d, want %d", p.Ready(), n)
		}
	}
}

func TestPool(t *testing.T) {
	testenv.CheckGoroutines(t)
	var started, discarded atomic.Int64
	p := New(3, func(ctx context.Context) (int64, error) { return started.Add(1), nil },
		func(int64) error { discarded.Add(1); return nil }, nil)
	waitReady(t, p, 3)
	v, ok := p.Take()
	if !ok || v != 1 {
		t.Fatalf("Take = %d, %v; want the first started, 1", v, ok)
	}
	waitReady(t, p, 3) // refilled
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if d := discarded.Load(); d != 3 {
		t.Errorf("Close discarded %d, want the 3 that waited", d)
	}
	if _, ok := p.Take(); ok || !p.Closed() {
		t.Error("Take after Close handed a value out")
	}
	if err := p.Close(); err != nil { // idempotent
		t.Fatal(err)
	}
}

// TestPoolRetriesAndStops: a failing start is retried after Retry, and
// Close ends a start in progress, discarding what it started.
func TestPoolRetriesAndStops(t *testing.T) {
	testenv.CheckGoroutines(t)
	var calls atomic.Int64
	p := New(1, func(ctx context.Context) (int, error) {
		if calls.Add(1) == 1 {
			return 0, errors.New("first start fails")
		}
		return 7, nil
	}, func(int) error { return nil }, nil)
	begin := time.Now()
	waitReady(t, p, 1)
	if d := time.Since(begin); d < Retry/2 {
		t.Errorf("retried after %v; want a pause of about %v", d, Retry)
	}
	p.Close()

	var discarded sync.WaitGroup
	discarded.Add(1)
	inStart := make(chan struct{})
	p = New(1, func(ctx context.Context) (int, error) {
		close(inStart)
		<-ctx.Done() // a slow start, ended by Close
		return 1, nil
	}, func(int) error { discarded.Done(); return nil }, nil)
	<-inStart
	p.Close()
	discarded.Wait() // the value started as the pool closed was discarded
}

// TestPoolLogsARepeatedFailureOnce: a start that fails the same way every
// time is logged once, not at every retry, and retried ever less often;
// a new error is logged again.
func TestPoolLogsARepeatedFailureOnce(t *testing.T) {
	testenv.CheckGoroutines(t)
	var logs testenv.Buffer
	var calls atomic.Int64
	var times []time.Time
	var mu sync.Mutex
	p := newPool(1, func(ctx context.Context) (int, error) {
		mu.Lock()
		times = append(times, time.Now())
		mu.Unlock()
		if calls.Add(1) <= 5 {
			return 0, errors.New("mkdir /ws/.ipybox: permission denied")
		}
		return 0, errors.New("another error")
	}, func(int) error { return nil }, slog.New(slog.NewTextHandler(&logs, nil)), 10*time.Millisecond)
	for deadline := time.Now().Add(10 * time.Second); calls.Load() < 7; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d starts", calls.Load())
		}
	}
	p.Close()
	if n := strings.Count(logs.String(), "permission denied"); n != 1 {
		t.Errorf("the same failure was logged %d times, want once:\n%s", n, logs.String())
	}
	if n := strings.Count(logs.String(), "another error"); n != 1 {
		t.Errorf("a new failure was logged %d times, want once:\n%s", n, logs.String())
	}
	mu.Lock()
	defer mu.Unlock()
	if first, fourth := times[1].Sub(times[0]), times[4].Sub(times[3]); fourth < 4*first {
		t.Errorf("pauses %v then %v: want them to grow", first, fourth)
	}
}

// TestPoolGrowsWithDemand: Takes that find the pool empty raise its
// target, one per miss, up to the maximum Grow allows; after a quiet
// period without misses the target comes back down to the base size, one
// step per period, and the extra values are discarded. On a fake clock.
func TestPoolGrowsWithDemand(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var started, discarded atomic.Int64
		release := make(chan struct{})
		p := New(1, func(ctx context.Context) (int64, error) {
			select {
			case <-release:
			case <-ctx.Done():
				return 0, ctx.Err()
			}
			return started.Add(1), nil
		}, func(int64) error { discarded.Add(1); return nil }, nil)
		p.Grow(3)
		for i := range 5 { // five misses while nothing is ready
			if _, ok := p.Take(); ok {
				t.Fatalf("Take %d found a value before any start finished", i)
			}
		}
		if got := p.Target(); got != 3 {
			t.Fatalf("after 5 misses the target is %d, want the maximum 3", got)
		}
		close(release)
		synctest.Wait()
		if got := p.Ready(); got != 3 {
			t.Fatalf("%d ready, want 3", got)
		}
		time.Sleep(Quiet)
		synctest.Wait()
		if got, ready := p.Target(), p.Ready(); got != 2 || ready != 2 {
			t.Fatalf("after one quiet period: target %d, ready %d; want 2 and 2", got, ready)
		}
		time.Sleep(3 * Quiet)
		synctest.Wait()
		if got, ready := p.Target(), p.Ready(); got != 1 || ready != 1 {
			t.Fatalf("after more quiet: target %d, ready %d; want the base size 1", got, ready)
		}
		if d := discarded.Load(); d != 2 {
			t.Errorf("%d discarded, want the 2 extra", d)
		}
		p.Close()
	})
}

package procexit

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"
)

func TestWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		release := make(chan struct{})
		boom := errors.New("exit status 1")
		e := Go(func() error { <-release; return boom })

		// A wait bounded by its context ends with the context, and the
		// exit is still to come.
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		start := time.Now()
		if err := e.Wait(ctx); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("bounded wait: %v, want the deadline", err)
		}
		if d := time.Since(start); d != time.Second {
			t.Errorf("bounded wait took %v, want exactly its bound", d)
		}
		select {
		case <-e.Done():
			t.Fatal("done before the wait returned")
		default:
		}

		// Every caller sees the one outcome, also with a context that
		// has already ended.
		results := make(chan error, 3)
		for range 3 {
			go func() { results <- e.Wait(context.Background()) }()
		}
		synctest.Wait()
		close(release)
		for range 3 {
			if err := <-results; err != boom {
				t.Errorf("wait: %v, want %v", err, boom)
			}
		}
		done, cancelDone := context.WithCancel(t.Context())
		cancelDone()
		if err := e.Wait(done); err != boom {
			t.Errorf("wait after the exit, with an ended context: %v, want the exit's %v", err, boom)
		}
	})
}

func TestReported(t *testing.T) {
	e, report := Reported()
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := e.Wait(ctx); err != context.Canceled {
		t.Fatalf("before the report: %v, want the context's error", err)
	}
	first := errors.New("signal: killed")
	report(first)
	report(errors.New("a later report"))
	if err := e.Wait(context.Background()); err != first {
		t.Errorf("wait: %v, want the first report", err)
	}
	select {
	case <-e.Done():
	default:
		t.Error("not done after the report")
	}
}

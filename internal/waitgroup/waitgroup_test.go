package waitgroup

import (
	"runtime"
	"testing"
	"time"
)

func TestGroup(t *testing.T) {
	var g Group
	if !g.Wait(time.Millisecond) {
		t.Fatal("an empty group is not done")
	}
	g.Add()
	g.Add()
	before := runtime.NumGoroutine()
	if g.Wait(20 * time.Millisecond) {
		t.Fatal("Wait returned true with two tasks running")
	}
	if after := runtime.NumGoroutine(); after > before {
		t.Errorf("a timed-out Wait left %d goroutines behind", after-before)
	}
	g.Done()
	release := make(chan struct{})
	go func() { <-release; g.Done() }()
	close(release)
	if !g.Wait(5 * time.Second) {
		t.Fatal("Wait did not see the last Done")
	}
	g.Add() // reusable after reaching zero
	g.Done()
	if !g.Wait(time.Millisecond) {
		t.Fatal("not done after a second round")
	}
}

package policy

import (
	"runtime"
	"runtime/metrics"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestLargeArgsBounded attacks invariant 10 through the approval policy:
// kernel code sends arguments of 14 MiB shaped to cost the most once
// decoded (7 million numbers, nested arrays, many keys), and a policy with
// argument rules decides them. Deciding holds at most a small multiple of
// the arguments on the heap (before, one such call took 740 MiB), and
// what the rules say still holds: a deny rule on a member it cannot
// decode denies (maybe), one on a scalar member matches it as before, and
// repeated keys deep inside are still refused.
func TestLargeArgsBounded(t *testing.T) {
	rs, err := Parse("p", []byte("deny tool t.x s=/etc/*\ndeny tool t.x v=*secret*\nallow tool t.x\n"))
	if err != nil {
		t.Fatal(err)
	}
	nums := strings.Repeat("0,", 7<<20) + "0"
	for _, tc := range []struct {
		name, args string
		want       Action
		maybe      bool
	}{
		{"numbers in a member no rule names", `{"w":[` + nums + `]}`, Allow, false},
		{"numbers in a member a deny rule names", `{"v":[` + nums + `]}`, Deny, true},
		{"nested arrays", `{"w":` + strings.Repeat("[", 999) + strings.Repeat("]", 999) + `,"x":[` + strings.Repeat("[],", 4<<20) + `[]]}`, Allow, false},
		{"a large string a deny rule matches", `{"s":"/etc/` + strings.Repeat("x", 14<<20) + `"}`, Deny, false},
		{"a large string a deny rule does not match", `{"s":"/home/` + strings.Repeat("x", 14<<20) + `"}`, Allow, false},
		{"a repeated key deep inside", `{"w":[{"a":1,"a":2}],"pad":"` + strings.Repeat("x", 1<<20) + `"}`, Deny, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stop := heapGrowth()
			d := Decide(&Call{Kind: KindTool, Server: "t", Tool: "x", Args: []byte(tc.args)}, rs)
			grew := stop()
			t.Logf("%d MiB of arguments: %v (maybe %v, %q); the heap grew by %d MiB at most", len(tc.args)>>20, d.Action, d.Maybe, d.Note, grew>>20)
			if d.Action != tc.want || d.Maybe != tc.maybe {
				t.Errorf("decision %v maybe %v (%q); want %v maybe %v", d.Action, d.Maybe, d.Note, tc.want, tc.maybe)
			}
			if limit := uint64(8 * len(tc.args)); grew > limit {
				t.Errorf("deciding grew the heap by %d MiB; want at most %d MiB", grew>>20, limit>>20)
			}
		})
	}
}

// heapGrowth samples the heap's live and unswept objects until stop is
// called, and returns its peak over the level at the start.
func heapGrowth() (stop func() uint64) {
	runtime.GC()
	s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	read := func() uint64 { metrics.Read(s); return s[0].Value.Uint64() }
	base, peak := read(), uint64(0)
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(200 * time.Microsecond)
		defer t.Stop()
		for {
			peak = max(peak, read())
			select {
			case <-done:
				return
			case <-t.C:
			}
		}
	})
	return func() uint64 {
		close(done)
		wg.Wait()
		return max(peak, base) - base
	}
}

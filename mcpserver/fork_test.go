//go:build linux

package mcpserver

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/ipybox/ipybox/internal/testenv"
)

// TestForkRewindTools: fork_session makes sessions that hold the source's
// variables and go their own way, its structured content lists their
// handles, and the first result of a fork says what it is;
// rewind_session undoes a cell, and the next result says so; past the
// bound it says how far it can go; a hibernated session is forked after
// it wakes.
func TestForkRewindTools(t *testing.T) {
	testenv.CheckGoroutines(t)
	testenv.NeedsPython(t)
	srv := newServer(t, &Options{Workspace: t.TempDir(), HTTP: HTTPOptions{NoAuth: true}, RewindDepth: 2})
	cs := connectHTTPAs(t, serveHTTP(t, srv), "", newVersion, nil)
	h := createSession(t, cs)
	runIn(t, cs, h, "xs = [1]")
	res := call(t, cs, "fork_session", map[string]any{"session": h, "count": 2})
	if res.IsError {
		t.Fatalf("fork_session: %s", text(res))
	}
	var out struct {
		Sessions []string
		Method   string
	}
	b, _ := json.Marshal(res.StructuredContent)
	if err := json.Unmarshal(b, &out); err != nil || len(out.Sessions) != 2 || out.Method != "process" {
		t.Fatalf("structured %s", b)
	}
	first := runIn(t, cs, out.Sessions[0], "xs.append(2); print(xs)")
	if !strings.Contains(first, "[1, 2]") || !strings.Contains(first, "fork of") {
		t.Fatalf("fork's first result: %q", first)
	}
	if got := runIn(t, cs, out.Sessions[1], "print(xs)"); !strings.Contains(got, "[1]") {
		t.Fatalf("second fork: %q", got)
	}
	if got := runIn(t, cs, h, "print(xs)"); !strings.Contains(got, "[1]") || strings.Contains(got, "[1, 2]") {
		t.Fatalf("source: %q", got)
	}
	runIn(t, cs, h, "del xs")
	res = call(t, cs, "rewind_session", map[string]any{"session": h, "cells": 1})
	if res.IsError {
		t.Fatalf("rewind_session: %s", text(res))
	}
	if got := runIn(t, cs, h, "print(xs)"); !strings.Contains(got, "[1]") || !strings.Contains(got, "rewound") {
		t.Fatalf("after rewind: %q", got)
	}
	res = call(t, cs, "rewind_session", map[string]any{"session": h, "cells": 3})
	if !res.IsError || !strings.Contains(text(res), "undo 1 to") {
		t.Fatalf("rewind past the bound: %q", text(res))
	}
	for _, f := range out.Sessions {
		if res := call(t, cs, "close_session", map[string]any{"session": f}); res.IsError {
			t.Fatal(text(res))
		}
	}
	// A hibernated session is woken, then forked.
	if err := srv.Hibernate(t.Context()); err != nil {
		t.Fatal(err)
	}
	res = call(t, cs, "fork_session", map[string]any{"session": h})
	if res.IsError {
		t.Fatalf("fork_session of a hibernated session: %s", text(res))
	}
	b, _ = json.Marshal(res.StructuredContent)
	if err := json.Unmarshal(b, &out); err != nil || len(out.Sessions) != 1 {
		t.Fatalf("structured %s", b)
	}
	t.Logf("source after wake: %q", runIn(t, cs, h, "print(xs)"))
	if got := runIn(t, cs, out.Sessions[0], "print(xs)"); !strings.Contains(got, "[1]") {
		t.Fatalf("fork of a hibernated session: %q", got)
	}
	call(t, cs, "close_session", map[string]any{"session": out.Sessions[0]})
	if got := runIn(t, cs, h, "print(len(xs))"); !strings.Contains(got, "1") {
		t.Fatalf("source after its forks closed: %q", got)
	}
}

// TestForkImplicitSession forks the connection's own kernel (stdio, where
// calls need no handle): the forks are sessions with handles.
func TestForkImplicitSession(t *testing.T) {
	testenv.CheckGoroutines(t)
	testenv.NeedsPython(t)
	srv := newServer(t, &Options{Workspace: t.TempDir()})
	cs := connect(t, srv, nil)
	run(t, cs, "z = 5")
	res := call(t, cs, "fork_session", map[string]any{})
	if res.IsError {
		t.Fatalf("fork_session: %s", text(res))
	}
	var out struct{ Sessions []string }
	b, _ := json.Marshal(res.StructuredContent)
	if err := json.Unmarshal(b, &out); err != nil || len(out.Sessions) != 1 {
		t.Fatalf("structured %s", b)
	}
	if got := runIn(t, cs, out.Sessions[0], "print(z * 2)"); !strings.Contains(got, "10") {
		t.Fatalf("fork: %q", got)
	}
	call(t, cs, "close_session", map[string]any{"session": out.Sessions[0]})
}

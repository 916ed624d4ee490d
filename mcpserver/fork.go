package mcpserver

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"runtime"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/ipybox/ipybox"
	"github.com/ipybox/ipybox/internal/defaults"
)

// The tools fork_session and rewind_session: a thin surface over
// Executor.Fork and Executor.Rewind (fork.go and rewind.go of package
// ipybox), which hold the logic.

type forkArgs struct {
	Session string `json:"session"`
	Count   int    `json:"count"`
}

type forkOut struct {
	Sessions []string `json:"sessions"`
	Method   string   `json:"method"`
}

type rewindArgs struct {
	Session string `json:"session"`
	Cells   int    `json:"cells"`
}

type rewindOut struct {
	Cells int `json:"cells"`
	Left  int `json:"left"`
}

// addForkTools adds fork_session and rewind_session.
func (s *Server) addForkTools() {
	mcp.AddTool(s.mcp, &mcp.Tool{
		Name:        "fork_session",
		Title:       "Copy a session",
		Description: fmt.Sprintf(`Make count new sessions (default 1, at most %d) whose kernels start with a copy of a session's variables, imports and definitions; the session itself runs on unchanged. Each copy has its own handle (structuredContent.sessions), and what one does to its variables the others do not see. Files are not copied: the copies share the workspace. Use it before a risky step, or to try several approaches from one state. A session that is running a cell cannot be copied until the cell ends.`, defaults.MaxForks) + threadHandle,
		InputSchema: schema(fmt.Sprintf(`{
  "type": "object",
  "properties": {
    "count": {"type": "integer", "minimum": 1, "maximum": %d, "default": 1, "description": "How many copies."},
    `+sessionProp+`
  },
  "additionalProperties": false
}`, defaults.MaxForks)),
		Annotations: &mcp.ToolAnnotations{Title: "Copy a session", IdempotentHint: false, OpenWorldHint: boolPtr(false)},
	}, s.forkSessionTool)
	mcp.AddTool(s.mcp, &mcp.Tool{
		Name:        "rewind_session",
		Title:       "Undo the last cells",
		Description: fmt.Sprintf(`Return a session's variables to what they were before its last cells cells (at most %d; the server keeps only the last few cell boundaries, and says how many it can undo). Files, installed packages and registered servers are not undone. A sandboxed or container session is rewound through a snapshot of its variables saved before each cell: open files, sockets and threads do not come back. The next result says what came back.`, defaults.MaxRewindDepth) + threadHandle,
		InputSchema: schema(fmt.Sprintf(`{
  "type": "object",
  "properties": {
    "cells": {"type": "integer", "minimum": 1, "maximum": %d, "default": 1, "description": "How many of the last cells to undo."},
    `+sessionProp+`
  },
  "additionalProperties": false
}`, defaults.MaxRewindDepth)),
		Annotations: &mcp.ToolAnnotations{Title: "Undo the last cells", DestructiveHint: boolPtr(true), OpenWorldHint: boolPtr(false)},
	}, s.rewindSessionTool)
}

func (s *Server) forkSessionTool(ctx context.Context, req *mcp.CallToolRequest, a forkArgs) (*mcp.CallToolResult, forkOut, error) {
	if a.Count == 0 {
		a.Count = 1
	}
	x, ex, ctx, done, err := s.useSession(ctx, req, a.Session, true)
	if err != nil {
		return nil, forkOut{}, err
	}
	defer done()
	// The sessions and their kernel slots come first: a fork is a kernel,
	// and none may start past the limits, even for as long as it takes
	// to be refused.
	ys, err := s.reserveForks(ctx, x, a.Count)
	if err != nil {
		return nil, forkOut{}, err
	}
	if s.forkSaves(ex) {
		// Its forks restore this save, made within the session's and the
		// workspace's snapshot budgets (Fork reuses it, as no cell runs).
		if _, err := s.save(ctx, x, ex); err != nil {
			s.dropForks(ys)
			return nil, forkOut{}, fmt.Errorf("this session's kernel is copied through a snapshot of its namespace, and saving it failed: %w", err)
		}
	}
	forks, err := ex.Fork(ctx, a.Count, func(_ int, o *ipybox.Options) error {
		if ex.PackageDir() != "" {
			o.PackageDir = filepath.Join(x.t.dir, ".ipybox", "packages", newFolderName())
		}
		if ex.SnapshotDir() != "" {
			o.SnapshotDir = filepath.Join(x.t.dir, ".ipybox", "snapshots", newFolderName())
		}
		return nil
	})
	if err != nil {
		s.dropForks(ys)
		return nil, forkOut{}, err
	}
	var out forkOut
	for i, f := range forks {
		if err := s.attachFork(x, ys[i], f); err != nil {
			for _, g := range forks[i+1:] {
				s.factory.closeExecutor(g, false)
			}
			s.dropForks(ys[i+1:])
			return nil, forkOut{}, fmt.Errorf("fork %d of %d: %w (the %d before it were made: %s)", i+1, len(forks), err, len(out.Sessions), strings.Join(out.Sessions, ", "))
		}
		out.Sessions = append(out.Sessions, ys[i].handle)
		out.Method = f.ForkInfo().Method
	}
	res := textResult("Made %d session(s) from %s (%s): %s. %s", len(out.Sessions), quote(a.Session), forks[0].ForkInfo().Note, strings.Join(out.Sessions, ", "), s.lifetime())
	return res, out, nil
}

// forkSaves reports whether ex is forked through a snapshot (see
// Executor.Fork): a sandboxed or container kernel, or any off Linux.
func (s *Server) forkSaves(ex *ipybox.Executor) bool {
	return ex.SnapshotDir() != "" && (s.factory.sandbox != nil || s.factory.opts.Container != nil || runtime.GOOS != "linux")
}

// reserveForks makes n sessions of x's principal for forks of x, each
// holding a kernel slot and its lock in the state folder, or none and
// the error of the limit that refused one.
func (s *Server) reserveForks(ctx context.Context, x *session, n int) ([]*session, error) {
	ys := make([]*session, 0, n)
	for range n {
		y, err := s.createSession(x.principal)
		if err != nil {
			s.dropForks(ys)
			return nil, err
		}
		ys = append(ys, y)
		if err := s.sessions.takeSlot(y); err != nil {
			s.dropForks(ys)
			return nil, err
		}
		if s.local() && s.durability.state != nil {
			lf, err := s.durability.state.lock(ctx, y.key, lockWait)
			if err != nil {
				s.dropForks(ys)
				return nil, err
			}
			y.startMu.Lock()
			y.lockf = lf
			y.startMu.Unlock()
		}
	}
	return ys, nil
}

// dropForks ends sessions of reserveForks that got no fork: their slots
// go back (a session without a kernel does not return its own).
func (s *Server) dropForks(ys []*session) {
	for _, y := range ys {
		s.sessions.releaseSlot(y)
		y.close()
	}
}

// attachFork makes fork f the kernel of y, a session of reserveForks: it
// knows the registrations x knows, and its record is saved. On an error
// f and y are ended.
func (s *Server) attachFork(x, y *session, f *ipybox.Executor) error {
	s.adopt(y, f)
	x.t.mu.Lock()
	maps.Copy(y.synced, x.synced)
	x.t.mu.Unlock()
	y.mu.Lock()
	if y.closed {
		y.mu.Unlock()
		s.factory.closeExecutor(f, false)
		s.dropForks([]*session{y})
		return errSessionClosed
	}
	y.ex = f
	y.owner = x.oauthOwner()
	y.warnings = append(y.warnings, "[ipybox: "+f.ForkInfo().Note+"]")
	y.mu.Unlock()
	s.saveRecord(y)
	s.ui.forked(y, x)
	return nil
}

func (s *Server) rewindSessionTool(ctx context.Context, req *mcp.CallToolRequest, a rewindArgs) (*mcp.CallToolResult, rewindOut, error) {
	if a.Cells == 0 {
		a.Cells = 1
	}
	x, ex, ctx, done, err := s.useSession(ctx, req, a.Session, true)
	if err != nil {
		return nil, rewindOut{}, err
	}
	defer done()
	rep, err := ex.Rewind(ctx, a.Cells)
	if errors.Is(err, ipybox.ErrBusy) {
		return nil, rewindOut{}, errors.New("the session is running a cell; rewind it when the cell has ended (collect_cell), or interrupt it")
	}
	if err != nil {
		return nil, rewindOut{}, err
	}
	x.mu.Lock()
	x.warnings = append(x.warnings, fmt.Sprintf("[ipybox: this session was rewound %d cell(s): its variables are as they were before %q; files, installed packages and registered servers were not rewound]", rep.Cells, rep.Before))
	x.mu.Unlock()
	res := textResult("Rewound %d cell(s): the variables are as they were before %q. %d more can be undone.", rep.Cells, rep.Before, rep.Left)
	return res, rewindOut{Cells: rep.Cells, Left: rep.Left}, nil
}

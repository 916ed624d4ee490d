package mcpserver

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"path/filepath"
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
		Description: fmt.Sprintf(`Return a session's variables to what they were before its last cells cells (at most %d; the server keeps only the last few cell boundaries, and says how many it can undo). Files, installed packages and registered servers are not undone. The next result says what came back.`, defaults.MaxRewindDepth) + threadHandle,
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
		return nil, forkOut{}, err
	}
	var out forkOut
	for i, f := range forks {
		y, err := s.adoptFork(ctx, x, f)
		if err != nil {
			for _, g := range forks[i:] {
				s.factory.closeExecutor(g, false)
			}
			return nil, forkOut{}, fmt.Errorf("fork %d of %d: %w (the %d before it were made: %s)", i+1, len(forks), err, len(out.Sessions), strings.Join(out.Sessions, ", "))
		}
		out.Sessions = append(out.Sessions, y)
		out.Method = f.ForkInfo().Method
	}
	res := textResult("Made %d session(s) from %s (%s): %s. %s", len(out.Sessions), quote(a.Session), forks[0].ForkInfo().Note, strings.Join(out.Sessions, ", "), s.lifetime())
	return res, out, nil
}

// adoptFork makes a session of x's principal around fork f, and returns
// its handle: it holds a kernel slot, the session's lock and record, and
// knows the registrations x knows.
func (s *Server) adoptFork(ctx context.Context, x *session, f *ipybox.Executor) (string, error) {
	y, err := s.createSession(x.principal)
	if err != nil {
		return "", err
	}
	fail := func(err error) (string, error) {
		s.factory.closeExecutor(f, false)
		y.close()
		s.forget(y, false)
		return "", err
	}
	if err := s.sessions.takeSlot(y); err != nil {
		return fail(err)
	}
	if s.local() && s.durability.state != nil {
		lf, err := s.durability.state.lock(ctx, y.key, lockWait)
		if err != nil {
			return fail(err)
		}
		y.startMu.Lock()
		y.lockf = lf
		y.startMu.Unlock()
	}
	s.adopt(y, f)
	x.t.mu.Lock()
	maps.Copy(y.synced, x.synced)
	x.t.mu.Unlock()
	y.mu.Lock()
	y.ex = f
	y.owner = x.oauthOwner()
	y.warnings = append(y.warnings, "[ipybox: "+f.ForkInfo().Note+"]")
	y.mu.Unlock()
	s.saveRecord(y)
	s.ui.forked(y, x)
	return y.handle, nil
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

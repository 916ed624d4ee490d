// Package ipybox runs code actions for AI agents: blocks of Python, with
// shell commands and MCP tool calls, in a stateful IPython kernel.
//
//	application ──── Executor.Stream(code) ────► kernel (ipykernel over ZeroMQ
//	   ▲   ▲                                        │  ipc; optionally sandboxed)
//	   │   │ events: output, displays, errors       │
//	   │   └────────────────────────────────────────┤
//	   │                                            │ a tool call (mcptools.S.T.run)
//	   │ *ApprovalRequest: Accept or Reject         │ or a shell command (!cmd)
//	   │                                            ▼
//	   └─────────────────────────────── tool server (unix socket, token)
//	                                                │ approved
//	                                                ▼
//	                                      MCP client ──► MCP server; the result
//	                                                     goes back to the kernel
//
// A minimal use:
//
//	ex, err := ipybox.Start(ctx, &ipybox.Options{WorkDir: dir})
//	if err != nil { ... }
//	defer ex.Close()
//	res, err := ex.Execute(ctx, "x = 6 * 7\nprint(x)", nil)
//	fmt.Println(res.Text) // 42
//
// # Cells and their events
//
// An [Executor] owns one kernel; its state (variables, imports) lasts from
// cell to cell until [Executor.Reset]. Cells run one at a time: a second
// call waits for the first. [Executor.Stream] yields a cell's events as
// they happen: *[Output] (stdout and stderr, apart), *[Display] (plots,
// tables, the last expression's value), *[ClearOutput] and
// *[ApprovalRequest], then the *[Result], which holds the cell's text, its
// images and its displays as they stand at the end. [Executor.Execute] is
// Stream run to its end. [ExecOptions].Timeout interrupts a cell that runs
// too long, and the kernel keeps its state.
//
// # Errors
//
// A Python exception is a *[PythonError] (with the partial [Result]
// before it); a timeout a *[TimeoutError], which matches [ErrTimeout]; a
// kernel that died during a call a *[DiedError], which matches
// [ErrKernelDied]. The next call starts a fresh kernel; a death between
// calls is told by that call's [Result].Restarted. After
// [Executor.Close], calls return [ErrClosed].
//
// # Tool calls and approvals
//
// [Executor.RegisterMCPServer] generates a typed Python module per tool of
// an MCP server ([ServerConfig]), which kernel code imports and calls.
// Kernel code cannot reach an MCP server by itself: each call goes to the
// host's tool server, which asks the application first (an
// *[ApprovalRequest] of Stream, answered with [ApprovalRequest.Accept] or
// [ApprovalRequest.Reject], or [Options].Approver for Execute; without one,
// calls are rejected) and only then calls the server. Shell commands are
// asked about the same way when [Options].ApproveShellCommands is set. An
// [ApprovalPolicy] file decides some requests by rule, and remembers
// answers ([Remember]). [ApproveAll] is the named way to let every call
// run.
//
// # Where the kernel runs
//
// By default the kernel is a local process with the user's rights, forked
// from a [Zygote] when one is given. [Options].Sandbox runs it in a
// bubblewrap sandbox ([SandboxConfig]; [DefaultSandbox] is a good start),
// [Options].Container in a Docker container ([ContainerConfig]), and
// [Options].Gateway on a Jupyter server ([GatewayConfig]). A sandbox or a
// container write-protects the workspace's paths that host programs run
// or read, and masks its secrets. A program that starts sandboxed kernels
// calls [SandboxInit] first in main.
//
// # Many kernels, kept kernels, kernels elsewhere
//
// A [Pool] keeps started Executors ready, so that [Pool.Get] hands out a
// warm one without waiting for a start. [Executor.Snapshot] saves a
// kernel's namespace to [Options].SnapshotDir, and [Executor.Restore]
// loads it back, into the same kernel after a Reset or into a later
// Executor's (what pickle can keep; [SnapshotReport] says what it could
// not).
// [Dial] connects to an `ipybox mcp` server (the mcpserver package) and
// runs cells in its sessions ([RemoteSession]), which outlive the
// connection.
package ipybox

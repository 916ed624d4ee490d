// Package mcpserver is ipybox's MCP server: it gives an MCP client (an
// agent such as Claude Code) stateful IPython kernels with programmatic
// MCP tool calling, as the tools execute_ipython_cell, register_mcp_server,
// install_package, reset, upload_file and download_file, and sessions
// (create_session, close_session, list_sessions).
//
//	srv, err := mcpserver.New(&mcpserver.Options{Workspace: dir})
//	if err != nil { ... }
//	defer srv.Close()
//	err = srv.Serve(ctx, &mcp.StdioTransport{}) // one connection, or:
//	http.ListenAndServe("127.0.0.1:8080", srv.Handler()) // many
//
// [New] builds a [Server] from [Options]; [Server.Serve] serves one
// connection (stdio), [Server.Handler] streamable HTTP, where every
// request must carry a bearer token of a principal (Options.HTTP.AuthToken,
// Options.HTTP.Principals) unless Options.HTTP.NoAuth says otherwise, and
// [CheckHTTPAddr] refuses an address that would listen beyond loopback
// without one (and any address that does not name its host).
// [Server.Shutdown] hibernates the sessions that hold a kernel, then
// closes the server.
//
// # Sessions and handles
//
// A session is a kernel behind a handle: create_session returns one, and
// the other tools take it as their session argument, from any connection,
// over either transport, for the principal whose token created it (a
// handle is bound to its principal, and unknown to the others). A
// connection that has a session of its own (stdio, or a 2025-11-25 HTTP
// transport session) also gets an implicit session, used by calls without
// a handle. The server negotiates MCP 2026-07-28 (server/discover;
// stateless over HTTP) and 2025-11-25 and older (initialize).
//
// A session's kernel starts at its first cell (from the warm pool, when it
// has one; the call waits for it, Options.Sessions.StartTimeout): a session
// that never runs a cell holds no kernel, and Options.Sessions.MaxSessions counts
// kernels. An idle session hibernates (its namespace saved, its kernel
// stopped; the next call restores it) and later expires; a session kept
// across a restart of the server comes back the same way.
//
// # The shared workspace
//
// Every session of a principal shares its workspace: its files, the
// generated tool modules (mcptools/), the registrations of MCP servers
// (.ipybox/servers.json), and the kernel's virtualenv (.ipybox/venv), which
// is created on first use with --system-site-packages. A server registered
// in one session can be used by the others: each session's executor learns
// it before its next call. With one principal (or none) the workspace is
// Options.Workspace; with several, each principal has its own below it
// (see tenant.go), and nothing one registers, installs or remembers reaches
// another.
//
// # Approvals
//
// With [ApprovalAuto] every tool call and shell command that a cell makes
// runs. With [ApprovalElicit] each one is put to the client as an MCP
// elicitation (accept runs it, anything else rejects it, and the cell sees
// ApprovalRejectedError): to a 2026-07-28 client as an input-required
// result whose retry brings the answer, while the cell waits at the call;
// to older clients as an elicitation request. Options.Approvals.AllowTools
// lets matching tool calls run without asking. A client without elicitation
// gets every call rejected, with a reason that says so.
//
// # Output
//
// A request with a progress token gets every chunk of its cell's output as
// a progress notification, the chunk's text as the message; a client that
// asked for log messages gets the chunks as those too. The result carries
// the cell's text (long output spilled to a file in the workspace), its
// images, and a structured form under the _meta key [CellMetaKey].
package mcpserver

// Package mcpserver is ipybox's MCP server: it gives an MCP client (an
// agent such as Claude Code) a stateful IPython kernel with programmatic
// MCP tool calling, as the tools execute_ipython_cell, register_mcp_server,
// install_package, reset, upload_file and download_file.
//
//	srv, err := mcpserver.New(&mcpserver.Options{Workspace: dir})
//	if err != nil { ... }
//	defer srv.Close()
//	err = srv.Serve(ctx, &mcp.StdioTransport{}) // one session, or:
//	http.ListenAndServe("127.0.0.1:8080", srv.Handler()) // a kernel per session
//
// Every session shares the workspace: its files, the generated tool modules
// (mcptools/), the registrations of MCP servers (.ipybox/servers.json), and
// the kernel's virtualenv (.ipybox/venv), which is created on first use with
// --system-site-packages. A server registered in one session can be used by
// the others: each session's executor learns it before its next call.
//
// A session's kernel starts in the background as soon as the client has
// initialised; the first tool call waits for it (Options.StartTimeout).
//
// Approval: with ApprovalAuto every tool call and shell command that a cell
// makes runs. With ApprovalElicit each one is put to the client as an MCP
// elicitation (accept runs it, anything else rejects it, and the cell sees
// ApprovalRejectedError); Options.AllowTools lets matching tool calls run
// without asking. A client without elicitation gets every call rejected,
// with a reason that says so.
package mcpserver

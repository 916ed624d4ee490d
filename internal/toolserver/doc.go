// Package toolserver is the host side of tool calls from kernel code: a
// small HTTP API that the kernel-side runtime (ipybox_runtime) uses to call
// a tool of a registered MCP server, or to ask approval for a shell
// command.
//
//	kernel code ── ipybox_runtime ──► toolserver ──► Approver ──► Caller ──► MCP server
//	                (token, unix socket)   (Host, token)  (the application)  (host-side registry)
//
// Every request needs the executor's random token; the server listens on a
// unix socket with mode 0600 or on loopback TCP with a Host check. Nothing
// the kernel sends chooses what runs: server and tool names are looked up
// by the Caller in the host-side registry, and arguments are passed on as
// data. Approval is middleware on the call path. With a nil
// Options.Approver every call and every shell command is rejected;
// AutoApprove and Options.AutoApproveTools are the named opt-outs. There is
// no endpoint that accepts an approval: decisions come only from the
// Approver, in process.
//
// docs/toolserver.md describes the wire protocol (endpoints, request and
// error shapes).
package toolserver

package mcpserver

import (
	"github.com/ipybox/ipybox"
)

// A new session, and a reset, needs a kernel at once: a cold start costs
// about 0.35 s of CPU (Python's imports), and a burst of sessions on two
// cores waits seconds for theirs. Two things remove that wait:
//   - a warm pool of Executors started in advance (Options.Sessions.Pool), refilled
//     in the background, sandboxed or not, which resets take too
//     (reset.go);
//   - unsandboxed, a fork server (a zygote: one Python process that has
//     imported ipykernel and forks a kernel per start), so that starts,
//     refills and resets take a fifth of the time. A sandboxed session
//     never gets a kernel forked inside a shared sandbox (it would share
//     its processes, files and sockets); with Sessions.SandboxZygote
//     (ipybox mcp's default) its kernel is forked into a sandbox of its
//     own (ipybox.NewSandboxZygote).

// warmExec is an Executor started in advance, with the registration
// generations it loaded at its start.
type warmExec struct {
	ex     *ipybox.Executor
	synced map[string]int
	owner  *oauthOwner
}

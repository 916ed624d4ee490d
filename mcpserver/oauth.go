package mcpserver

import (
	"context"
	"crypto/rand"
	"fmt"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/ipybox/ipybox/internal/escape"
)

// oauthOwner is the MCP session an executor serves: when a remote MCP
// server needs an OAuth sign-in, that session's client is asked to open the
// authorization URL, through URL-mode elicitation. Warm executors start
// without a session; startExecutor sets it.
type oauthOwner struct {
	// tenant says the executor's principal is one of several, whose
	// sign-ins are its own (ipybox.Options.Tenant): `ipybox auth login`
	// does not sign in for it.
	tenant bool

	mu   sync.Mutex
	ss   *mcp.ServerSession
	call context.Context // the running tool call's request, if any
}

// setCall records the tool call that runs now, so that a sign-in it needs
// is asked on that request's stream; the returned function forgets it.
func (o *oauthOwner) setCall(ctx context.Context) func() {
	o.mu.Lock()
	o.call = ctx
	o.mu.Unlock()
	return func() {
		o.mu.Lock()
		if o.call == ctx {
			o.call = nil
		}
		o.mu.Unlock()
	}
}

func (o *oauthOwner) set(ss *mcp.ServerSession) {
	o.mu.Lock()
	o.ss = ss
	o.mu.Unlock()
}

// openURL is the executor's ipybox.Options.OAuthURL.
func (o *oauthOwner) openURL(ctx context.Context, server, url string) error {
	o.mu.Lock()
	ss, call := o.ss, o.call
	o.mu.Unlock()
	login := fmt.Sprintf("sign in with `ipybox auth login %s` (run in a terminal on this host, with this --workspace) and try again", server)
	if o.tenant {
		login = "with several principals each signs in for itself, through an MCP client that supports URL-mode elicitation (`ipybox auth login` signs in for a server without principals); connect with one and try again"
	}
	if ss == nil {
		return fmt.Errorf("MCP server %q needs an OAuth sign-in, and no MCP client is connected to open the sign-in page; %s", server, login)
	}
	ip := ss.InitializeParams()
	if ip == nil || ip.Capabilities == nil || ip.Capabilities.Elicitation == nil || ip.Capabilities.Elicitation.URL == nil {
		return fmt.Errorf("MCP server %q needs an OAuth sign-in, and this MCP client cannot open the sign-in page for ipybox (it does not support URL-mode elicitation); %s", server, login)
	}
	if call != nil {
		// On the running call's request stream, for no longer than the
		// caller (the sign-in's own bound) waits.
		ectx, cancel := context.WithCancel(call)
		defer cancel()
		defer context.AfterFunc(ctx, cancel)()
		if dl, ok := ctx.Deadline(); ok {
			var cancelDL context.CancelFunc
			ectx, cancelDL = context.WithDeadline(ectx, dl)
			defer cancelDL()
		}
		ctx = ectx
	}
	res, err := ss.Elicit(ctx, &mcp.ElicitParams{
		Mode:          "url",
		Message:       "ipybox: sign in to the MCP server " + escape.Text(server) + ", so that code run by the agent can call its tools. The page comes back to ipybox on this host.",
		URL:           url,
		ElicitationID: rand.Text(),
	})
	switch {
	case err != nil:
		return fmt.Errorf("asking the MCP client to open the sign-in page of MCP server %q failed (%v); %s", server, err, login)
	case res.Action != "accept":
		return fmt.Errorf("the user did not open the sign-in page of MCP server %q (%s)", server, res.Action)
	}
	return nil
}

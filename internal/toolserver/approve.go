package toolserver

import (
	"context"
	"encoding/json"
	"errors"

	"github.com/ipybox/ipybox/internal/mcpconn"
)

// ToolCall is one tool call that kernel code asked for, as the Approver
// sees it. Server and Tool are the names the kernel sent; they are only
// looked up in the host-side registry, never interpreted. Args is the JSON
// object the kernel sent, byte for byte, as it goes to the MCP server: an
// Approver that looks inside decodes what it needs (into a struct, whose
// size it chooses), and must not modify it.
type ToolCall struct {
	Server string
	Tool   string
	Args   json.RawMessage
}

// Approver decides whether a tool call or a shell command from kernel code
// may run. It is the only way to approve anything: the tool server has no
// network endpoint that accepts an approval.
//
// A nil error approves. ErrApprovalTimeout (or an error wrapping it) means
// that nobody decided in time. Any other error rejects; a *RejectedError
// carries a reason that is shown to the kernel code. Both methods must
// return promptly once ctx is done: the tool server cancels ctx when its
// approval timeout expires, when the kernel gives up, and on Close.
type Approver interface {
	ApproveTool(ctx context.Context, c *ToolCall) error
	ApproveShell(ctx context.Context, command string) error
}

// AutoApprove is an Approver that approves every tool call and every shell
// command. It is the explicit opt-out of approval ("auto mode"); a nil
// Options.Approver rejects everything instead.
var AutoApprove Approver = autoApprove{}

type autoApprove struct{}

func (autoApprove) ApproveTool(context.Context, *ToolCall) error { return nil }
func (autoApprove) ApproveShell(context.Context, string) error   { return nil }

var (
	// ErrRejected reports that the application rejected a tool call or a
	// shell command. errors.Is(err, ErrRejected) holds for *RejectedError.
	ErrRejected = errors.New("rejected by the application")

	// ErrApprovalTimeout reports that no decision was made in time. An
	// Approver returns it (or wraps it) when its own deadline passes; the
	// tool server also reports it when Options.ApprovalTimeout expires.
	ErrApprovalTimeout = errors.New("approval timed out")

	// ErrUnknownServer reports a server name that is not in the host-side
	// registry. A Caller returns it (or wraps it) so that the kernel code
	// sees an "unknown_server" error instead of a tool error. It is
	// mcpconn's, so that a Manager is a Caller as it is.
	ErrUnknownServer = mcpconn.ErrUnknownServer

	// ErrNoModule is what Options.Modules returns (or wraps) for a name it
	// does not serve; the kernel's import then fails as for a missing
	// module.
	ErrNoModule = errors.New("no such module")

	// ErrClosed is returned by the Listen methods after Close.
	ErrClosed = errors.New("tool server: closed")
)

// RejectedError is a rejection with a reason. The reason is sent to the
// kernel code, where it becomes the message of ApprovalRejectedError.
type RejectedError struct {
	Reason string
}

func (e *RejectedError) Error() string {
	if e.Reason == "" {
		return ErrRejected.Error()
	}
	return ErrRejected.Error() + ": " + e.Reason
}

// Is makes errors.Is(err, ErrRejected) true for a *RejectedError.
func (e *RejectedError) Is(target error) bool { return target == ErrRejected }

// Package mcptest provides a small MCP server for tests: in process
// (NewServer, StartHTTP) and as a binary (cmd/testmcp, built by Build).
//
// The server's tools are fixed so that tests across the repo can rely on
// them:
//
//   - tool-1 (a hyphenated name): takes {"s": string}, returns the text "tool-1: " + s.
//   - tool_2: takes an optional {"delay": seconds}, sleeps that long, returns the text "tool_2 done".
//     Options.Sleeping tells a test that a call with a delay has begun its sleep.
//   - tool_3: takes {"name": string, "count": int}, returns structured content
//     with a nested object ({"name", "inner": {"count", "tags"}}) and has an output schema.
//   - env: takes {"name": string}, returns the server process's value of that
//     environment variable (empty text when unset).
//   - fail: returns a tool error (isError) with the text "fail: " + reason.
//   - image: returns a 1x1 PNG image and a text.
//   - pid: returns the server's process id as text.
//   - traceparent: returns the W3C traceparent its request carried in
//     _meta (empty text when none), as MCP's trace-context convention puts
//     it; Options.TraceParent records it too.
//   - crash: only when Options.Exit is set; calls Exit(3) before answering.
//   - extra_0000 ... : Options.ExtraTools trivial tools.
package mcptest

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// DefaultPageSize is the tools/list page size when Options.PageSize is zero.
// It is small so that a server with ExtraTools paginates.
const DefaultPageSize = 50

// Options configures NewServer. The zero value (or nil) gives the standard
// tools, pages of DefaultPageSize and no crash tool.
type Options struct {
	// ExtraTools adds this many trivial tools named extra_0000, extra_0001, ...
	// Zero adds none.
	ExtraTools int
	// PageSize is the number of tools per tools/list page. Zero means
	// DefaultPageSize.
	PageSize int
	// HangInitialize makes the server never answer initialize (nor
	// server/discover): the request blocks until its context ends.
	HangInitialize bool
	// Exit, when set, adds the tool "crash", which calls Exit(3). The binary
	// passes os.Exit. Nil means no crash tool, as is right in process.
	Exit func(code int)
	// Done, when closed, ends at once what would otherwise block until its
	// request ends: HangInitialize and tool_2's sleep. A server in process
	// needs it to shut down, because closing a session waits for its
	// handlers. Nil means they end only with their request. Handler and
	// StartHTTP set it when it is nil.
	Done <-chan struct{}
	// Sleeping, when set, is called as a tool_2 call with a delay begins
	// its sleep: a test then knows that the call has reached the server,
	// and need not guess how long that takes. The binary prints
	// "testmcp: tool_2 sleeping" to stderr. Nil calls nothing.
	Sleeping func()
	// TraceParent, when set, is called with the traceparent in the _meta
	// of every tools/call request ("" when none). Nil calls nothing.
	TraceParent func(tool, traceparent string)
}

// Tool1Args are the arguments of tool-1.
type Tool1Args struct {
	S string `json:"s" jsonschema:"the text to echo"`
}

// Tool2Args are the arguments of tool_2.
type Tool2Args struct {
	Delay float64 `json:"delay,omitempty" jsonschema:"seconds to sleep before answering"`
}

// Tool3Args are the arguments of tool_3.
type Tool3Args struct {
	Name  string `json:"name" jsonschema:"a name"`
	Count int    `json:"count,omitempty" jsonschema:"a count"`
}

// Tool3Inner is the nested object in tool_3's output.
type Tool3Inner struct {
	Count int      `json:"count"`
	Tags  []string `json:"tags"`
}

// Tool3Result is tool_3's structured output.
type Tool3Result struct {
	Name  string     `json:"name"`
	Inner Tool3Inner `json:"inner"`
}

type envArgs struct {
	Name string `json:"name" jsonschema:"the environment variable to read"`
}

type failArgs struct {
	Reason string `json:"reason,omitempty" jsonschema:"the error text"`
}

// pngPixel is a valid 1x1 transparent PNG.
const pngPixel = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="

// NewServer returns a new MCP server named "mcptest" with the tools listed
// in the package documentation. opts may be nil.
func NewServer(opts *Options) *mcp.Server {
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.PageSize <= 0 {
		o.PageSize = DefaultPageSize
	}
	s := mcp.NewServer(&mcp.Implementation{Name: "mcptest", Version: "v0.0.1"}, &mcp.ServerOptions{PageSize: o.PageSize})

	mcp.AddTool(s, &mcp.Tool{Name: "tool-1", Description: "Echoes s as \"tool-1: <s>\"."},
		func(_ context.Context, _ *mcp.CallToolRequest, in Tool1Args) (*mcp.CallToolResult, any, error) {
			return text("tool-1: " + in.S), nil, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "tool_2", Description: "Sleeps delay seconds, then answers."},
		func(ctx context.Context, _ *mcp.CallToolRequest, in Tool2Args) (*mcp.CallToolResult, any, error) {
			if in.Delay > 0 {
				if o.Sleeping != nil {
					o.Sleeping()
				}
				select {
				case <-time.After(time.Duration(in.Delay * float64(time.Second))):
				case <-ctx.Done():
					return nil, nil, ctx.Err()
				case <-o.Done:
					return nil, nil, errors.New("tool_2: the server is shutting down")
				}
			}
			return text("tool_2 done"), nil, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "tool_3", Description: "Returns structured content with a nested object."},
		func(_ context.Context, _ *mcp.CallToolRequest, in Tool3Args) (*mcp.CallToolResult, Tool3Result, error) {
			return nil, Tool3Result{Name: in.Name, Inner: Tool3Inner{Count: in.Count, Tags: []string{"a", "b"}}}, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "env", Description: "Returns the server's value of an environment variable."},
		func(_ context.Context, _ *mcp.CallToolRequest, in envArgs) (*mcp.CallToolResult, any, error) {
			return text(os.Getenv(in.Name)), nil, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "fail", Description: "Always fails with a tool error."},
		func(_ context.Context, _ *mcp.CallToolRequest, in failArgs) (*mcp.CallToolResult, any, error) {
			r := text("fail: " + in.Reason)
			r.IsError = true
			return r, nil, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "image", Description: "Returns a 1x1 PNG."},
		func(_ context.Context, _ *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
			data, err := base64.StdEncoding.DecodeString(pngPixel)
			if err != nil {
				return nil, nil, err
			}
			return &mcp.CallToolResult{Content: []mcp.Content{
				&mcp.TextContent{Text: "a pixel"},
				&mcp.ImageContent{Data: data, MIMEType: "image/png"},
			}}, nil, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "traceparent", Description: "Returns the traceparent in the request's _meta."},
		func(_ context.Context, req *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
			return text(metaTraceParent(req)), nil, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "pid", Description: "Returns the server's process id."},
		func(_ context.Context, _ *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
			return text(strconv.Itoa(os.Getpid())), nil, nil
		})
	if o.Exit != nil {
		exit := o.Exit
		mcp.AddTool(s, &mcp.Tool{Name: "crash", Description: "Exits the server process with status 3."},
			func(_ context.Context, _ *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
				exit(3)
				return text("unreachable"), nil, nil
			})
	}
	for i := range o.ExtraTools {
		name := fmt.Sprintf("extra_%04d", i)
		mcp.AddTool(s, &mcp.Tool{Name: name, Description: "A trivial tool."},
			func(_ context.Context, _ *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
				return text(name), nil, nil
			})
	}
	addMiddleware(s, &o)
	return s
}

// addMiddleware adds what o asks of every request: telling TraceParent
// of each tool call's traceparent, and never answering the handshake.
func addMiddleware(s *mcp.Server, o *Options) {
	if o.TraceParent != nil {
		s.AddReceivingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler {
			return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
				if r, ok := req.(*mcp.CallToolRequest); ok && r.Params != nil {
					o.TraceParent(r.Params.Name, metaTraceParent(r))
				}
				return next(ctx, method, req)
			}
		})
	}
	if o.HangInitialize {
		s.AddReceivingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler {
			return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
				if method == "initialize" || method == "server/discover" {
					select {
					case <-ctx.Done():
						return nil, ctx.Err()
					case <-o.Done:
						return nil, errors.New("the server is shutting down")
					}
				}
				return next(ctx, method, req)
			}
		})
	}
}

// metaTraceParent is the traceparent in a tools/call request's _meta.
func metaTraceParent(req *mcp.CallToolRequest) string {
	if req == nil || req.Params == nil {
		return ""
	}
	tp, _ := req.Params.Meta["traceparent"].(string)
	return tp
}

func text(s string) *mcp.CallToolResult {
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: s}}}
}

// Command testmcp serves the mcptest MCP server over stdio, streamable HTTP
// or SSE, for tests that need a real server process.
//
// Usage:
//
//	testmcp [--transport stdio|http|sse] [--addr 127.0.0.1:0] [--extra-tools N] [--page-size N] [--hang-initialize]
//
// For http and sse, the first line on stdout is the server's URL (ending in
// /mcp or /sse); the server then runs until SIGINT or SIGTERM. Logs go to
// stderr, as does "testmcp: tool_2 sleeping" when a call of tool_2 with a
// delay begins its sleep. The tool "crash" makes the process exit with
// status 3.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/ipybox/ipybox/internal/mcptest"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "testmcp:", err)
		os.Exit(1)
	}
}

func run() error {
	transport := flag.String("transport", "stdio", "stdio, http (streamable HTTP) or sse")
	addr := flag.String("addr", "127.0.0.1:0", "loopback address to listen on for http and sse")
	extra := flag.Int("extra-tools", 0, "number of extra trivial tools")
	pageSize := flag.Int("page-size", 0, "tools/list page size (0: mcptest.DefaultPageSize)")
	hang := flag.Bool("hang-initialize", false, "never answer initialize")
	flag.Parse()

	opts := &mcptest.Options{ExtraTools: *extra, PageSize: *pageSize, HangInitialize: *hang, Exit: os.Exit,
		Sleeping: func() { fmt.Fprintln(os.Stderr, "testmcp: tool_2 sleeping") }}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	switch *transport {
	case "stdio":
		fmt.Fprintln(os.Stderr, "testmcp: serving stdio")
		err := mcptest.NewServer(opts).Run(ctx, &mcp.StdioTransport{})
		if errors.Is(err, context.Canceled) {
			return nil
		}
		return err
	case "http", "sse":
		return serveHTTP(ctx, *transport, *addr, opts)
	default:
		return fmt.Errorf("--transport %q: want stdio, http or sse", *transport)
	}
}

func serveHTTP(ctx context.Context, transport, addr string, opts *mcptest.Options) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("--addr %q: %v", addr, err)
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return fmt.Errorf("--addr %q: only loopback addresses (such as 127.0.0.1:0) are allowed", addr)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	h, shutdown := mcptest.Handler(transport, opts)
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	fmt.Printf("http://%s%s\n", ln.Addr(), mcptest.URLPath(transport))
	fmt.Fprintf(os.Stderr, "testmcp: serving %s on %s\n", transport, ln.Addr())
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	shutdown()
	// SSE streams never end by themselves, so a graceful shutdown is bounded.
	sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		srv.Close()
	}
	<-errc
	return nil
}

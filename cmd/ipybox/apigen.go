package main

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"time"

	"github.com/ipybox/ipybox"
)

const apigenUsage = `
Usage: ipybox apigen --name NAME --server JSON [--out DIR]

Connects to an MCP server, lists its tools and generates one typed Python
module per tool in DIR/NAME/ (Params, Result, run, run_async), replacing
only that folder. Prints the module names, one per line.

JSON is a server config: {"command": "...", "args": [...], "env": {...}} for
stdio, or {"url": "...", "headers": {...}} for streamable HTTP or SSE.
--server - reads it from standard input instead, keeping secret values off
the command line. ${VAR} placeholders are taken from the environment.
`

// maxServerConfig bounds a server config read from standard input.
const maxServerConfig = 1 << 20

func apigenCommand() *command {
	return &command{name: "apigen", summary: "generate typed Python modules for an MCP server's tools", run: runApigen}
}

func runApigen(ctx context.Context, env *cliEnv, args []string) int {
	fs := newFlagSet(env, "apigen", apigenUsage)
	name := fs.String("name", "", "the server's `NAME`, a Python identifier (the package name under DIR)")
	server := fs.String("server", "", "the server config as `JSON`, or - to read it from standard input")
	out := fs.String("out", "mcptools", "the output `DIR`")
	timeout := fs.Duration("timeout", 60*time.Second, "bound on connecting and listing")
	if done, code := parseFlags(fs, env, args); done {
		return code
	}
	if *name == "" || *server == "" || fs.NArg() > 0 {
		fmt.Fprintln(env.stderr, "ipybox apigen: --name and --server are required (and nothing else); see `ipybox help apigen`")
		return exitUsage
	}
	raw := []byte(*server)
	if *server == "-" {
		// From standard input: a config with secret values (headers, env)
		// stays off the command line, which every local user can read.
		var err error
		if raw, err = io.ReadAll(io.LimitReader(env.stdin, maxServerConfig+1)); err != nil {
			fmt.Fprintf(env.stderr, "ipybox apigen: reading --server - from standard input: %v\n", err)
			return exitUsage
		}
		if len(raw) > maxServerConfig {
			fmt.Fprintf(env.stderr, "ipybox apigen: --server -: the config on standard input is over %d bytes\n", maxServerConfig)
			return exitUsage
		}
	}
	cfg, err := parseServer(raw)
	if err != nil {
		fmt.Fprintf(env.stderr, "ipybox apigen: --server: %v\n", err)
		return exitUsage
	}
	dir, err := filepath.Abs(*out)
	if err != nil {
		fmt.Fprintf(env.stderr, "ipybox apigen: --out: %v\n", err)
		return exitUsage
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	mods, err := ipybox.GenerateToolModules(ctx, *name, cfg, dir, &ipybox.GenerateOptions{OAuthURL: printAuthURL(env.stderr, "ipybox apigen")})
	if err != nil {
		fmt.Fprintf(env.stderr, "ipybox apigen: %v\n", err)
		return exitFail
	}
	for _, m := range mods {
		fmt.Fprintln(env.stdout, m.Name)
	}
	return exitOK
}

package mcpconn

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/ipybox/ipybox/internal/hostproc"
	"github.com/ipybox/ipybox/internal/linelog"
)

// stderrLog returns the stderr of a stdio server: each line becomes one log
// record, so that a server's chatter never reaches our stdout, and the last
// lines can explain a failure.
func stderrLog(log *slog.Logger, server string, scrub func(string) string) *linelog.Writer {
	return &linelog.Writer{Emit: func(line string) {
		log.Info("mcp server stderr", "server", server, "line", scrub(line))
	}}
}

// baseEnvVars are the host variables a stdio server inherits. Everything
// else it gets comes from its config's env.
var baseEnvVars = []string{"PATH", "HOME", "LANG", "USER", "SHELL", "TERM"}

// defaultPath is PATH for a stdio server when the host has none.
const defaultPath = "/usr/local/bin:/usr/bin:/bin"

// stdioEnv builds a stdio server's environment: the base variables from the
// host, then the config's env on top.
func (m *Manager) stdioEnv(cfgEnv map[string]string) []string {
	env := map[string]string{}
	for _, k := range baseEnvVars {
		if v, ok := m.opts.LookupEnv(k); ok {
			env[k] = v
		}
	}
	if _, ok := env["PATH"]; !ok {
		env["PATH"] = defaultPath
	}
	maps.Copy(env, cfgEnv)
	out := make([]string, 0, len(env))
	for k, v := range env {
		out = append(out, k+"="+v)
	}
	return out
}

// stdioCommand builds the command of a stdio server from its expanded
// config, passing it through Options.StdioCommand.
func (m *Manager) stdioCommand(ctx context.Context, name string, cfg Config, stderr io.Writer) (*exec.Cmd, error) {
	cmd := exec.Command(cfg.Command, cfg.Args...)
	cmd.Env = m.stdioEnv(cfg.Env)
	cmd.Dir = cfg.Cwd
	cmd.Stderr = stderr
	// A grandchild that keeps stderr open must not hold Wait forever.
	cmd.WaitDelay = m.opts.StopGrace
	host := cmd
	if m.opts.StdioCommand != nil {
		c, err := m.opts.StdioCommand(ctx, name, cfg, cmd)
		if err != nil {
			return nil, fmt.Errorf("MCP server %q: preparing the command: %w", name, err)
		}
		if c == nil {
			return nil, fmt.Errorf("MCP server %q: Options.StdioCommand returned no command", name)
		}
		cmd = c
	}
	if cmd == host {
		// It runs on the host, unwrapped: invariant 14. A bare name is
		// found on PATH only outside the folders kernel code can write
		// (an activated workspace venv's bin comes first on PATH).
		if !strings.ContainsRune(cfg.Command, filepath.Separator) {
			if p, err := hostproc.LookPath(cfg.Command, m.opts.Writable); err == nil {
				cmd.Path, cmd.Err = p, nil
			}
		}
		dropped, err := hostproc.Prepare(cmd, m.opts.Writable)
		if err == nil {
			if a, w := hostproc.ArgInside(cmd.Path, cmd.Args[1:], cmd.Dir, m.opts.Writable); w != "" {
				err = &hostproc.WritableError{What: "argument", Path: a, Folder: w}
			}
		}
		if err != nil {
			var we *hostproc.WritableError
			if errors.As(err, &we) {
				return nil, fmt.Errorf("MCP server %q: %w; set \"sandbox\": true in its config to run it sandboxed there, or give it a cwd, a program and files outside that folder", name, err)
			}
			return nil, fmt.Errorf("MCP server %q: %w", name, err)
		}
		if len(dropped) > 0 {
			m.log.Warn("dropped search-path entries from a stdio server's environment: they are relative or in a folder that kernel code can write",
				"server", name, "dropped", dropped)
		}
	}
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = procAttr()
	}
	return cmd, nil
}

package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"sort"

	"github.com/ipybox/ipybox"
	"github.com/ipybox/ipybox/internal/jsonerr"
	"github.com/ipybox/ipybox/internal/mcpconn"
)

// namedServer is one entry of an mcpServers file.
type namedServer struct {
	name string
	cfg  ipybox.ServerConfig
}

// loadMCPConfig reads the common {"mcpServers": {NAME: CONFIG}} format (as
// Claude Code and other MCP clients write it). Servers come back sorted by
// name; each config is validated as mcpconn.ParseConfig does.
func loadMCPConfig(path string) ([]namedServer, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("--mcp-config: %w", err)
	}
	var file struct {
		Servers map[string]json.RawMessage `json:"mcpServers"`
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(&file); err != nil {
		return nil, fmt.Errorf("--mcp-config %s: %w; want {\"mcpServers\": {\"name\": {\"command\": ...}}}", path, jsonerr.At(b, err))
	}
	if file.Servers == nil {
		return nil, fmt.Errorf("--mcp-config %s: no \"mcpServers\" object; want {\"mcpServers\": {\"name\": {\"command\": ...}}}", path)
	}
	var out []namedServer
	for name, raw := range file.Servers {
		if err := mcpconn.ValidName(name); err != nil {
			return nil, fmt.Errorf("--mcp-config %s: %w", path, err) // it names the server
		}
		cfg, err := parseServer(raw)
		if err != nil {
			return nil, fmt.Errorf("--mcp-config %s: server %q: %w", path, name, err)
		}
		out = append(out, namedServer{name, cfg})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
	return out, nil
}

// parseServer reads one server's config with the registry's checks, into
// the SDK's type (the two share the JSON format).
func parseServer(raw []byte) (ipybox.ServerConfig, error) {
	var pub ipybox.ServerConfig
	cfg, err := mcpconn.ParseConfig(raw)
	if err != nil {
		return pub, err
	}
	b, err := json.Marshal(cfg)
	if err == nil {
		err = json.Unmarshal(b, &pub)
	}
	return pub, err
}

package mcpconn

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"path/filepath"
	"slices"
	"sync"

	"github.com/ipybox/ipybox/internal/safefs"
)

// A Registry holds the named MCP server configs of one workspace. It is safe
// for concurrent use. Configs are kept as given, with their ${VAR}
// placeholders.
type Registry struct {
	mu      sync.RWMutex
	servers map[string]regEntry
	gen     uint64 // counts Adds, so that a Manager notices a replaced config
}

type regEntry struct {
	cfg Config // never mutated after Add, so it may be shared read-only
	gen uint64
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry {
	return &Registry{servers: map[string]regEntry{}}
}

// nameRule is the rule that ValidName enforces, as stated in its errors.
const nameRule = "a server name must be a Python identifier made of ASCII letters, digits and underscores, " +
	"not starting with a digit or with two underscores, at most 64 characters, and not a Python keyword"

// pythonKeywords are Python's hard keywords. Soft keywords (match, case,
// type, _) are valid module names and so are allowed.
var pythonKeywords = map[string]bool{
	"False": true, "None": true, "True": true, "and": true, "as": true, "assert": true,
	"async": true, "await": true, "break": true, "class": true, "continue": true,
	"def": true, "del": true, "elif": true, "else": true, "except": true, "finally": true,
	"for": true, "from": true, "global": true, "if": true, "import": true, "in": true,
	"is": true, "lambda": true, "nonlocal": true, "not": true, "or": true, "pass": true,
	"raise": true, "return": true, "try": true, "while": true, "with": true, "yield": true,
}

// ValidName reports whether name can name a server. The name becomes a
// Python package (mcptools.<name>) and a folder, so it must be a Python
// identifier that is not a keyword. Only ASCII is accepted, because Python
// NFKC-normalizes identifiers and two different file names could then name
// one module. A leading "__" is refused, so that no server is called
// __init__ or __pycache__.
func ValidName(name string) error {
	bad := func(why string) error {
		return fmt.Errorf("mcpconn: server name %q %s: %s", name, why, nameRule)
	}
	switch {
	case name == "":
		return fmt.Errorf("mcpconn: empty server name: %s", nameRule)
	case len(name) > 64:
		return bad("is too long")
	case pythonKeywords[name]:
		return bad("is a Python keyword")
	case len(name) >= 2 && name[:2] == "__":
		return bad("starts with two underscores")
	case name[0] >= '0' && name[0] <= '9':
		return bad("starts with a digit")
	}
	for _, r := range name {
		if !(r == '_' || 'a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9') {
			return bad(fmt.Sprintf("contains %q", r))
		}
	}
	return nil
}

// Add validates name and cfg and stores cfg under name, replacing any config
// of the same name. A Manager notices the change and reconnects.
func (r *Registry) Add(name string, cfg Config) error {
	if err := ValidName(name); err != nil {
		return err
	}
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("server %q: %w", name, err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.gen++
	r.servers[name] = regEntry{cfg: cfg.clone(), gen: r.gen}
	return nil
}

// Remove deletes the named server and reports whether it was there.
func (r *Registry) Remove(name string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	_, ok := r.servers[name]
	delete(r.servers, name)
	return ok
}

// Get returns a copy of the named server's config.
func (r *Registry) Get(name string) (Config, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	e, ok := r.servers[name]
	return e.cfg.clone(), ok
}

// lookup returns the named server's shared config and its generation.
// The config must not be modified.
func (r *Registry) lookup(name string) (regEntry, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	e, ok := r.servers[name]
	return e, ok
}

// Names returns the registered names, sorted.
func (r *Registry) Names() []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return slices.Sorted(maps.Keys(r.servers))
}

// registryFile is the JSON layout of servers.json, the common "mcpServers"
// layout, so that existing configs can be pasted in.
type registryFile struct {
	MCPServers map[string]json.RawMessage `json:"mcpServers"`
}

// Save writes the registry to path (normally <workspace>/.ipybox/servers.json)
// with the placeholders as given, never their values. The file has mode 0600
// and is replaced atomically; its folder is created with mode 0700 if needed.
func (r *Registry) Save(path string) error {
	r.mu.RLock()
	f := registryFile{MCPServers: map[string]json.RawMessage{}}
	for name, e := range r.servers {
		b, err := json.Marshal(e.cfg)
		if err != nil {
			r.mu.RUnlock()
			return fmt.Errorf("mcpconn: saving server %q: %w", name, err)
		}
		f.MCPServers[name] = b
	}
	r.mu.RUnlock()
	data, err := json.MarshalIndent(f, "", "  ")
	if err != nil {
		return fmt.Errorf("mcpconn: saving servers: %w", err)
	}
	return writeFileAtomic(path, append(data, '\n'))
}

// writeFileAtomic replaces path (<workspace>/.ipybox/servers.json) with
// data. The workspace is trusted; below it, kernel code may have planted
// links, which are not followed (safefs): the file is replaced, not
// written through a link.
func writeFileAtomic(path string, data []byte) error {
	base, rel := splitRegistryPath(path)
	if err := safefs.MkdirAll(base, filepath.Dir(rel), 0o700); err != nil {
		return fmt.Errorf("mcpconn: saving servers: %w", err)
	}
	if err := safefs.WriteFile(base, rel, data, 0o600); err != nil {
		return fmt.Errorf("mcpconn: saving servers: %w", err)
	}
	return nil
}

// splitRegistryPath splits a registry path into the trusted directory two
// levels up (the workspace) and the rest.
func splitRegistryPath(path string) (base, rel string) {
	dir := filepath.Dir(path)
	return filepath.Dir(dir), filepath.Join(filepath.Base(dir), filepath.Base(path))
}

// maxRegistry bounds servers.json.
const maxRegistry = 16 << 20

// LoadRegistry reads a registry saved by Save. A missing file gives an empty
// registry. Every name and config is validated as by Add.
func LoadRegistry(path string) (*Registry, error) {
	base, rel := splitRegistryPath(path)
	data, err := safefs.ReadFile(base, rel, maxRegistry)
	if errors.Is(err, fs.ErrNotExist) {
		return NewRegistry(), nil
	}
	if err != nil {
		return nil, fmt.Errorf("mcpconn: loading servers: %w", err)
	}
	var f registryFile
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("mcpconn: loading %s: %w (want {\"mcpServers\": {\"name\": {...}}})", path, err)
	}
	r := NewRegistry()
	for name, raw := range f.MCPServers {
		c, err := ParseConfig(raw)
		if err != nil {
			return nil, fmt.Errorf("mcpconn: loading %s: server %q: %w", path, name, err)
		}
		if err := r.Add(name, c); err != nil {
			return nil, fmt.Errorf("mcpconn: loading %s: %w", path, err)
		}
	}
	return r, nil
}

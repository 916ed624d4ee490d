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

	"github.com/ipybox/ipybox/internal/pygen"
	"github.com/ipybox/ipybox/internal/safefs"
	"github.com/ipybox/ipybox/internal/statedir"
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

// ValidName reports whether name can name a server (pygen.ValidServerName:
// one rule for the whole project).
func ValidName(name string) error { return pygen.ValidServerName(name) }

// Add validates name and cfg and stores cfg under name, replacing any config
// of the same name. A Manager notices the change and reconnects.
func (r *Registry) Add(name string, cfg Config) error {
	if err := ValidName(name); err != nil {
		return err
	}
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("MCP server %q: %w", name, err)
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
			return fmt.Errorf("saving server %q: %w", name, err)
		}
		f.MCPServers[name] = b
	}
	r.mu.RUnlock()
	data, err := json.MarshalIndent(f, "", "  ")
	if err != nil {
		return fmt.Errorf("saving servers: %w", err)
	}
	return writeFileAtomic(path, append(data, '\n'))
}

// saveLocks serialise the read, change and replace of each registry file
// among the registries of this process, by path.
var saveLocks sync.Map // path -> *sync.Mutex

// SaveEntry writes the named server's config (or its absence, when the
// registry has none) into the file at path, keeping every other entry as
// the file has it: what other registries (other sessions' executors)
// saved is not lost to this one's older view. The read, change and
// replace are serialised within this process. Between processes that
// register at the same moment on one workspace, the last replace wins:
// no file lock is taken, because kernel code, which can open the
// workspace's files, could hold one for as long as it likes. A file that
// does not load is not overwritten: the error says so.
func (r *Registry) SaveEntry(path, name string) error {
	mu, _ := saveLocks.LoadOrStore(filepath.Clean(path), new(sync.Mutex))
	mu.(*sync.Mutex).Lock()
	defer mu.(*sync.Mutex).Unlock()
	base, rel := splitRegistryPath(path)
	f := registryFile{MCPServers: map[string]json.RawMessage{}}
	data, err := safefs.ReadFile(base, rel, maxRegistry)
	switch {
	case errors.Is(err, fs.ErrNotExist), errors.Is(err, safefs.ErrSymlink):
		// A link kernel code planted is neither read nor kept: the write
		// below replaces it with the registry's own file.
	case err != nil:
		return fmt.Errorf("saving servers: %w", err)
	default:
		if err := json.Unmarshal(data, &f); err != nil {
			return fmt.Errorf("saving servers: %s does not load, and is left as it is: %w", path, err)
		}
		if f.MCPServers == nil {
			f.MCPServers = map[string]json.RawMessage{}
		}
	}
	r.mu.RLock()
	e, ok := r.servers[name]
	r.mu.RUnlock()
	if ok {
		b, err := json.Marshal(e.cfg)
		if err != nil {
			return fmt.Errorf("saving server %q: %w", name, err)
		}
		f.MCPServers[name] = b
	} else {
		delete(f.MCPServers, name)
	}
	out, err := json.MarshalIndent(f, "", "  ")
	if err != nil {
		return fmt.Errorf("saving servers: %w", err)
	}
	return writeFileAtomic(path, append(out, '\n'))
}

// writeFileAtomic replaces path (<workspace>/.ipybox/servers.json) with
// data. The workspace is trusted; below it, kernel code may have planted
// links, which are not followed (safefs): the file is replaced, not
// written through a link.
func writeFileAtomic(path string, data []byte) error {
	base, rel := splitRegistryPath(path)
	if filepath.Dir(rel) == statedir.Name {
		if _, err := statedir.Ensure(base); err != nil {
			return fmt.Errorf("saving servers: %w", err)
		}
	} else if err := safefs.MkdirAll(base, filepath.Dir(rel), 0o700); err != nil {
		return fmt.Errorf("saving servers: %w", err)
	}
	if err := safefs.WriteFile(base, rel, data, 0o600); err != nil {
		return fmt.Errorf("saving servers: %w", err)
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
		return nil, fmt.Errorf("loading servers: %w", err)
	}
	var f registryFile
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("loading %s: %w (want {\"mcpServers\": {\"name\": {...}}})", path, err)
	}
	r := NewRegistry()
	for name, raw := range f.MCPServers {
		c, err := ParseConfig(raw)
		if err != nil {
			return nil, fmt.Errorf("loading %s: server %q: %w", path, name, err)
		}
		if err := r.Add(name, c); err != nil {
			return nil, fmt.Errorf("loading %s: %w", path, err)
		}
	}
	return r, nil
}

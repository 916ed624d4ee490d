package mcpserver

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/ipybox/ipybox"
	"github.com/ipybox/ipybox/internal/safefs"
)

// A tenant is one principal's share of the server (docs/design.md, invariant
// 15): its workspace folder, and everything that lives there or follows
// from it (the registry of MCP servers, mcptools/, the virtualenv, the
// sessions' package and snapshot folders, ipybox-outputs/), the
// in-memory registration table, the fork server of its unsandboxed
// kernels, and the locks of these. What one tenant's kernels,
// registrations, installs and answers write, no other tenant's sees or
// runs.
//
// Where a tenant's folder is:
//   - with at most one principal (stdio, --no-auth, one token), there is
//     one tenant, and its folder is the workspace itself: the layout and
//     the paths are those of a server without principals;
//   - with several principals (Options.HTTP.Principals, with AuthToken's
//     "default" among them), each principal's folder is
//     <workspace>/<principal>, made at its first use (mode of the
//     workspace, without following a link). Its kernels get it as their
//     working folder, and so see nothing above it: the sandbox binds that
//     folder alone, and the container mounts it at /app/workspace. The
//     workspace's own .ipybox (the state folder of the sessions) is not
//     in any kernel's view.
//
// Unsandboxed, every kernel runs as the user who runs ipybox, and can
// write every tenant's folder (invariant 2): tenants then keep apart
// what the server does for each (installs, registrations, remembered
// answers), not what kernel code can do as that user.
//
// Locks: t.readyMu (across the folder's creation and check, a few file
// operations), t.venvMu (across the virtualenv's creation) and t.zygMu
// (across the fork server's start) are each taken alone. t.mu guards the
// registration table and the synced generations of the tenant's
// sessions, in memory only; it is taken after lockName(name) and never
// with s.sessions.mu. s.tenantMu, the Server's, guards the map of
// tenants and is a leaf.
// What is shared belongs to the Server's other parts: the snapshot
// budget (budget.go, in durability.go), the warm pool (factory.go, only
// with one tenant), the kernel limits (sessiontable.go).
type tenant struct {
	s *Server
	// principal names the tenant in logs; dir is its workspace folder (a
	// real path); multi says there are several tenants (dir is then below
	// the workspace, and made at first use).
	principal string
	dir       string
	multi     bool

	readyMu  sync.Mutex
	ready    bool
	readyErr error

	venvMu   sync.Mutex // serialises the virtualenv's creation
	venvPy   string     // the virtualenv's interpreter once created
	venvBase string     // the interpreter it was made from, when this server made it
	baseVenv *baseVenv  // the base interpreter's venv (basevenv.go); set under venvMu before venvPy

	zygMu  sync.Mutex
	zyg    *ipybox.Zygote // the fork server of unsandboxed kernels, once started
	zygErr error

	mu sync.Mutex
	// regs is the registration table and regGen its last generation.
	// nameLocks order the registrations of one name (see lockName).
	regs      map[string]*registration
	regGen    int
	nameLocks map[string]*nameLock
	// serversPending counts the client stdio registrations under way, which
	// reserveServer counts with those of regs.
	serversPending int
	// hostOK holds the stdio servers the user approved to run on the
	// host in this run (askHostServer), by name.
	hostOK map[string]ipybox.ServerConfig
}

// newTenant returns the tenant of principal (no I/O: its folder is made
// by ensure), with the operator's servers (Options.Servers) registered.
func newTenant(s *Server, principal, dir string, multi bool) *tenant {
	t := &tenant{s: s, principal: principal, dir: dir, multi: multi,
		regs: map[string]*registration{}, nameLocks: map[string]*nameLock{}}
	for _, name := range slices.Sorted(maps.Keys(s.opts.Servers)) {
		t.regGen++
		t.regs[name] = &registration{cfg: s.opts.Servers[name], gen: t.regGen}
	}
	return t
}

// multiTenant reports whether the tokens name more than one principal.
func multiTenant(tokens []principalToken) bool {
	seen := map[string]bool{}
	for _, pt := range tokens {
		seen[pt.name] = true
	}
	return len(seen) > 1
}

// checkTenantNames refuses, with several principals, a name that cannot
// be a folder of the workspace of its own: "." and "..", names that start
// with a dot (".ipybox" is the workspace's state folder), and two names
// that differ only in case (one folder on a file system that ignores
// case, as macOS's does by default).
func checkTenantNames(tokens []principalToken) error {
	if !multiTenant(tokens) {
		return nil
	}
	folded := map[string]string{}
	for _, pt := range tokens {
		if strings.HasPrefix(pt.name, ".") {
			return fmt.Errorf("principal name %q starts with '.': with several principals each has the folder <workspace>/<name>, and a name may not start with a dot; rename it in the token file", pt.name)
		}
		low := strings.ToLower(pt.name)
		if other, ok := folded[low]; ok && other != pt.name {
			return fmt.Errorf("principal names %q and %q differ only in case: with several principals each has the folder <workspace>/<name>, which may be one folder where case is ignored; rename one in the token file", other, pt.name)
		}
		folded[low] = pt.name
	}
	return nil
}

// tenantDir is principal's folder with several principals.
func tenantDir(workspace, principal string) string {
	return filepath.Join(workspace, principal)
}

// tenant returns principal's tenant, making it at first use (without
// I/O). With one tenant, every principal gets it.
func (s *Server) tenant(principal string) *tenant {
	if !s.multi {
		return s.only
	}
	s.tenantMu.Lock()
	defer s.tenantMu.Unlock()
	t := s.tenants[principal]
	if t == nil {
		dir := tenantDir(s.workspace, principal)
		if strings.HasPrefix(principal, ".") {
			// Only from a record of the state folder (New refuses such
			// tokens): ".." would name the workspace's parent.
			dir = ""
		}
		t = newTenant(s, principal, dir, true)
		s.tenants[principal] = t
	}
	return t
}

// allTenants returns the tenants made so far.
func (s *Server) allTenants() []*tenant {
	if !s.multi {
		return []*tenant{s.only}
	}
	s.tenantMu.Lock()
	defer s.tenantMu.Unlock()
	return slices.Collect(maps.Values(s.tenants))
}

// tenantDirs returns the folders of every principal the tokens name
// (and localPrincipal's), made or not: the snapshot budget counts them
// all.
func (s *Server) tenantDirs() []string {
	if !s.multi {
		return []string{s.workspace}
	}
	seen := map[string]bool{localPrincipal: true}
	for _, pt := range s.tokens {
		seen[pt.name] = true
	}
	var out []string
	for _, p := range slices.Sorted(maps.Keys(seen)) {
		out = append(out, tenantDir(s.workspace, p))
	}
	return out
}

// ensure makes the tenant's folder when it is a principal's of several:
// below the workspace, without following a link, with the workspace's
// mode; then checks it as a workspace (its .ipybox, its registry) and
// makes the server's binds in it. Once made, later calls return at once.
func (t *tenant) ensure() error {
	t.readyMu.Lock()
	defer t.readyMu.Unlock()
	if t.ready || t.readyErr != nil {
		return t.readyErr
	}
	t.readyErr = t.make()
	t.ready = t.readyErr == nil
	return t.readyErr
}

func (t *tenant) make() error {
	if !t.multi {
		return nil // the workspace, checked by New
	}
	if t.dir == "" {
		return fmt.Errorf("principal %q has no folder: with several principals a name may not start with '.'", t.principal)
	}
	ws := t.s.workspace
	st, err := os.Stat(ws)
	if err != nil {
		return fmt.Errorf("the folder of principal %q: %w", t.principal, err)
	}
	if err := safefs.MkdirAll(ws, t.principal, st.Mode().Perm()); err != nil {
		return fmt.Errorf("the folder of principal %q, %s: %w (remove what is there, or rename the principal)", t.principal, t.dir, err)
	}
	fi, err := os.Lstat(t.dir)
	if err != nil || !fi.IsDir() {
		return fmt.Errorf("the folder of principal %q, %s, is not a folder; remove it", t.principal, t.dir)
	}
	if uid, ok := fileOwner(fi); ok && uid != os.Getuid() {
		return fmt.Errorf("the folder of principal %q, %s, belongs to another user; remove it", t.principal, t.dir)
	}
	if err := ipybox.CheckWorkspace(t.dir); err != nil {
		return err
	}
	return t.s.makeBinds(t.dir)
}

// zygote returns the tenant's fork server for python (its virtualenv's
// interpreter), starting it once; nil when it cannot start (kernels then
// start cold, which still works). A fork server is a tenant's own: the
// site-packages it imported at its start (.pth files included) are in
// every kernel it forks.
func (t *tenant) zygote(ctx context.Context, python string, sandboxed bool) *ipybox.Zygote {
	t.zygMu.Lock()
	defer t.zygMu.Unlock()
	if t.zyg != nil || t.zygErr != nil || t.s.opts.Sessions.NoZygote || sandboxed && !t.s.opts.Sessions.SandboxZygote {
		return t.zyg
	}
	if sandboxed {
		t.zyg, t.zygErr = ipybox.NewSandboxZygote(ctx, python, t.s.log)
	} else {
		t.zyg, t.zygErr = ipybox.NewZygote(ctx, python, t.s.log)
	}
	if t.zygErr != nil {
		t.s.log.Warn("the fork server did not start; kernels start cold", "principal", t.principal, "err", t.zygErr)
	}
	return t.zyg
}

// close stops the tenant's fork server (after its kernels).
func (t *tenant) close() {
	t.zygMu.Lock()
	defer t.zygMu.Unlock()
	if t.zyg != nil {
		t.zyg.Close()
	}
}

// allowedDirs returns the real paths of the host folders upload_file and
// download_file may use for this tenant: Options.AllowedDirs, or by
// default its folder and the system's temporary folder; with several
// principals, its folder and a transfer folder of its own (transferDir).
func (t *tenant) allowedDirs() []string {
	if !t.multi || t.s.opts.AllowedDirs != nil {
		return t.s.allowed
	}
	out := []string{t.dir}
	if real, err := t.transferDir(); err == nil {
		out = append(out, real)
	} else {
		t.s.log.Warn("no transfer folder for this principal; upload_file and download_file use its workspace folder only", "principal", t.principal, "err", err)
	}
	return out
}

// othersFolder reports whether the host path real (links resolved) is in
// another principal's folder, which this tenant's file transfers may not
// touch whatever the allowed folders say.
func (t *tenant) othersFolder(real string) bool {
	if !t.multi {
		return false
	}
	for _, d := range append(t.s.tenantDirs(), filepath.Join(t.s.workspace, ".ipybox")) {
		if d != t.dir && within(real, d) {
			return true
		}
	}
	return false
}

// soleTenantName names the one tenant: the principal of the tokens, or
// localPrincipal without any.
func soleTenantName(tokens []principalToken) string {
	if len(tokens) > 0 {
		return tokens[0].name
	}
	return localPrincipal
}

// imagesDir is where the tenant's kernels put images: Options.ImagesDir
// ("" means <folder>/images), below which each of several principals
// has a folder of its own.
func (t *tenant) imagesDir() string {
	if t.s.opts.ImagesDir == "" || !t.multi {
		return t.s.opts.ImagesDir
	}
	return filepath.Join(t.s.opts.ImagesDir, t.principal)
}

// principalCount is the number of principals the tokens name.
func principalCount(tokens []principalToken) int {
	names := map[string]bool{}
	for _, t := range tokens {
		names[t.name] = true
	}
	return max(1, len(names))
}

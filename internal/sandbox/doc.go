// Package sandbox runs processes (the IPython kernel, stdio MCP servers)
// inside a bubblewrap sandbox on Linux, and never runs them unsandboxed
// instead.
//
//	cfg, err := sandbox.LoadConfig("srt-settings.json") // or sandbox.DefaultConfig()
//	...
//	sb, err := sandbox.New(cfg, &sandbox.Options{
//		Workspace: "/home/me/project",
//		Forwards:  []sandbox.Forward{{Port: 8765, Socket: toolSocket}},
//	})
//	...
//	defer sb.Close()
//	k, err := kernel.Start(ctx, &kernel.Options{Launcher: sb, ...}) // sb is a kernel.Launcher
//
// The ipybox binary must dispatch to the sandbox's init (InitMain) when
// its first argument is InitCommand; the init runs inside the sandbox.
//
// # Layers (Linux)
//
// Start and Command run bwrap directly, with new user, pid, ipc, uts,
// cgroup and network namespaces, all capabilities dropped, no nested user
// namespaces, a new session, and death with the parent. The file system
// is a read-only minimal root (/usr, /etc without its secrets, the Python
// prefix; or the whole host with rootMode "host"), a private /tmp, /dev
// and /proc, the workspace and the run directory writable at their host
// paths (nosuid, nodev), with denyRead paths and secrets masked.
//
// Inside, the init (this package's InitMain, a hidden subcommand of the
// ipybox binary) relays 127.0.0.1 ports to host unix sockets (the tool
// server, the egress proxy), then starts the program with no_new_privs,
// optional Landlock, resource limits set at its exec, and the seccomp
// filter of internal/seccomp: no setuid or setgid file, no io_uring, no
// keyrings, no AF_VSOCK, memory outside the limit refused. The init also
// runs the workspace guard: the filter hands it every call that creates,
// changes, renames or removes a name, and it refuses those that touch a
// path host programs run or obey (internal/hostpaths), at any depth. It
// stays as the program's parent to relay signals: a SIGINT sent with
// Process.Signal reaches the program's process group.
//
// The only way out to the network is the egress proxy (internal/egress),
// which runs in this process: HTTP CONNECT and plain HTTP, for the names
// the settings allow, never to IP literals that are not listed, never to
// loopback, private or link-local addresses.
//
// # macOS
//
// On macOS the same Config runs the program under sandbox-exec with a
// Seatbelt profile generated from it (seatbelt_policy.go, golden-tested
// on every system): reads of the system, writes to the workspace and the
// writable folders, the proxy on loopback; writes denied to every entry
// of internal/hostpaths' list at any depth and case-insensitively, to the
// secrets (also unreadable), and file-write-setugid. Namespaces, seccomp,
// Landlock, the guard's git-config walk and the per-process limits do not
// exist there. Elsewhere (Windows) New fails: no sandbox runs.
//
// # Settings
//
// Config reads the JSON settings of Anthropic's sandbox-runtime (srt)
// unchanged; see Config for the extensions. Probe reports, with the cause
// and the fix, why the sandbox cannot run on a host.
package sandbox

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
// # Layers
//
// Start and Command run bwrap directly, with new user, pid, ipc, uts,
// cgroup and network namespaces, all capabilities dropped, no nested user
// namespaces, a new session, and death with the parent. The file system
// is a read-only minimal root (/usr, /etc without its secrets, the Python
// prefix; or the whole host with rootMode "host"), a private /tmp, /dev
// and /proc, the workspace and the run directory writable at their host
// paths, with denyRead paths masked and write-protected paths read-only.
//
// Inside, the init (this package's InitMain, a hidden subcommand of the
// ipybox binary) relays 127.0.0.1 ports to host unix sockets (the tool
// server, the egress proxy), then starts the program with no_new_privs,
// optional Landlock, and a seccomp filter that refuses AF_VSOCK sockets,
// io_uring, the kernel keyring, x32 system calls and foreign
// architectures. It stays as the program's parent to relay signals: a
// SIGINT sent with Process.Signal reaches the program's process group.
//
// The only way out to the network is the egress proxy, which runs in this
// process: HTTP CONNECT and plain HTTP, for the names the settings allow,
// never to IP literals that are not listed, never to loopback, private or
// link-local addresses.
//
// # Settings
//
// Config reads the JSON settings of Anthropic's sandbox-runtime (srt)
// unchanged; see Config for the extensions. Probe reports, with the cause
// and the fix, why the sandbox cannot run on a host.
package sandbox

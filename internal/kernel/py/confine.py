# Confines a kernel run as uid 0 in the ipybox image (docker run --user
# 0:0), before any of its code runs, when the host asks (IPYBOX_CONFINE=1):
# there uid 0 has no capabilities but owns the image's files and shares
# the server's uid. A Landlock domain of its own (Linux 6.12 or later)
# keeps it from writing the image's system folders (/usr, /etc, /bin,
# /lib, /var, /opt, /boot, /root; a rename or a new file there too), from
# signalling processes outside its domain (the server, the fork server,
# other kernels), and from abstract unix sockets outside it. The
# workspace, /tmp, the run directory and every other folder stay
# writable. Without Landlock it refuses to start: the server's error says
# how to run the image instead. launch.py and the fork server's child call
# it once the kernel's environment is set.
def _ipybox_confine():
    import os, ctypes, struct
    if os.environ.pop("IPYBOX_CONFINE", "") != "1":
        return
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    create, add, restrict = 444, 445, 446  # the same on every architecture
    abi = libc.syscall(create, None, ctypes.c_size_t(0), ctypes.c_uint32(1))
    if abi < 6:
        raise SystemExit("ipybox: this kernel runs as root in the ipybox image and must be confined by Landlock with signal scoping (ABI 6, Linux 6.12), which this system lacks (ABI %d); run the container as the workspace's owner instead (docker run --user UID:GID)" % abi)
    write = (1 << 1) | sum(1 << b for b in range(4, 13)) | (1 << 13) | (1 << 14)
    system = {"usr", "etc", "bin", "sbin", "lib", "lib32", "lib64", "libx32", "boot", "opt", "var", "root"}
    try:
        allowed = ["/var/tmp"] + ["/" + n for n in os.listdir("/") if n not in system]
    except PermissionError:
        # The domain the server starts every process in (hostproc's
        # ImageDomain) hides "/" from listing, and already keeps the system
        # folders read-only and the server's /ipybox out of reach: this
        # domain then only scopes, to this kernel.
        write, allowed = 0, []
    attr = ctypes.create_string_buffer(struct.pack("=QQQ", write, 0, 3), 24)  # scoped: abstract sockets, signals
    fd = libc.syscall(create, attr, ctypes.c_size_t(24), ctypes.c_uint32(0))
    if fd < 0:
        raise SystemExit("ipybox: landlock_create_ruleset: errno %d" % ctypes.get_errno())
    for p in allowed:
        if os.path.islink(p) or not os.path.isdir(p):
            continue  # a link to /usr/lib and the like: not what it names
        try:
            d = os.open(p, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            continue
        rule = ctypes.create_string_buffer(struct.pack("=Qi", write, d), 12)
        r = libc.syscall(add, ctypes.c_int(fd), ctypes.c_int(1), rule, ctypes.c_uint32(0))
        os.close(d)
        if r != 0:
            raise SystemExit("ipybox: landlock_add_rule %s: errno %d" % (p, ctypes.get_errno()))
    libc.prctl(38, 1, 0, 0, 0)  # PR_SET_NO_NEW_PRIVS, which restrict_self needs
    if libc.syscall(restrict, ctypes.c_int(fd), ctypes.c_uint32(0)) != 0:
        raise SystemExit("ipybox: landlock_restrict_self: errno %d" % ctypes.get_errno())
    os.close(fd)

# A kernel forked into a sandbox (G in sbzygote.py): it is in the
# sandbox's namespaces already, with the sandbox's uid and no capability.
# It says hello to the sandbox's init on the setup socket (the init learns
# its pid from the kernel's own credentials on the message), receives its
# session from the init (argv, environment, working directory, resource
# limits, the seccomp program, Landlock rulesets, its standard streams),
# applies the restrictions in the order the init applies them to a
# program it starts (no_new_privs, resource limits, Landlock, the socket
# ruleset, the seccomp filter), hands the guard's listener to the init,
# and only then runs the program: the kernel, or `python -c` code.
def _ipybox_sandbox_child(setup):
    import os, sys, json, socket, signal, ctypes, struct, array, resource
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    def fail(msg):
        try:
            os.write(setup, json.dumps({"error": msg}).encode())
        except OSError:
            pass
        os._exit(125)
    os.closerange(3, setup)
    os.closerange(setup + 1, 1 << 16)
    os.setsid()
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET, fileno=setup)
    s.send(b'{"hello":1}')
    data, anc, _, _ = s.recvmsg(16 << 20, socket.CMSG_SPACE(4 * 8))
    if not data:
        os._exit(125)
    fds = array.array("i")
    for level, kind, payload in anc:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(payload[:len(payload) - len(payload) % fds.itemsize])
    c = json.loads(data)
    fds = list(fds)
    if len(fds) < 3:
        fail("setup: want the standard streams")
    for i in range(3):
        os.dup2(fds[i], i)
        os.close(fds[i])
    rulesets = fds[3:]
    _ipybox_set_cmdline(c["argv"])
    try:
        os.chdir(c["dir"])
    except OSError as e:
        fail("chdir %s: %s" % (c["dir"], e))
    os.environ.clear()
    for kv in c["env"]:
        k, _, v = kv.partition("=")
        os.environ[k] = v
    if libc.prctl(38, 1, 0, 0, 0) != 0:  # PR_SET_NO_NEW_PRIVS
        fail("prctl(PR_SET_NO_NEW_PRIVS): errno %d" % ctypes.get_errno())
    if libc.prctl(4, 1, 0, 0, 0) != 0:  # PR_SET_DUMPABLE, as after an exec: the guard reads our memory
        fail("prctl(PR_SET_DUMPABLE): errno %d" % ctypes.get_errno())
    try:
        for res, val in c.get("rlimits") or []:
            resource.setrlimit(res, (val, val))
    except (OSError, ValueError) as e:
        fail("setrlimit: %s" % e)
    for fd in rulesets:
        if libc.syscall(ctypes.c_long(446), ctypes.c_long(fd), ctypes.c_long(0)) != 0:  # landlock_restrict_self
            fail("landlock_restrict_self: errno %d" % ctypes.get_errno())
        os.close(fd)
    prog = bytes.fromhex(c["filter"])
    buf = ctypes.create_string_buffer(prog, len(prog))
    fprog = struct.pack("=HxxxxxxQ", len(prog) // 8, ctypes.addressof(buf))
    fbuf = ctypes.create_string_buffer(fprog, len(fprog))
    nr = ctypes.c_long(c["seccomp_nr"])
    listener = -1
    if c.get("guard"):
        # SECCOMP_SET_MODE_FILTER, NEW_LISTENER | WAIT_KILLABLE_RECV, then NEW_LISTENER alone
        listener = libc.syscall(nr, ctypes.c_long(1), ctypes.c_long(8 | 32), fbuf)
        if listener < 0 and ctypes.get_errno() == 22:
            listener = libc.syscall(nr, ctypes.c_long(1), ctypes.c_long(8), fbuf)
        if listener < 0:
            fail("seccomp: errno %d" % ctypes.get_errno())
    elif libc.syscall(nr, ctypes.c_long(1), ctypes.c_long(0), fbuf) != 0:
        fail("seccomp: errno %d" % ctypes.get_errno())
    del prog, buf, fbuf
    if listener >= 0:
        s.sendmsg([b'{"ok":1}'], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [listener]))])
        os.close(listener)
    else:
        s.send(b'{"ok":1}')
    s.close()
    signal.signal(signal.SIGINT, signal.default_int_handler)
    _ipybox_confine()
    argv = c["argv"]
    if c.get("pythonpath"):
        sys.path[:] = list(c["pythonpath"]) + [p for p in _base_path if p]
    if os.environ.get("PYTHONDONTWRITEBYTECODE"):
        sys.dont_write_bytecode = True
    random.seed()
    if c.get("kernel"):
        sys.argv = ["ipykernel_launcher"] + list(argv[3:])
        if _ipybox_template_fits(_template, argv[3:]):
            _ipybox_start_with_template(_template)
        else:
            _ipybox_drop_template(_template)
            _app.launch_new_instance()
        os._exit(0)
    _ipybox_drop_template(_template)
    # `python -c CODE ARGS...`, as the interpreter would run it.
    sys.argv = ["-c"] + list(argv[3:])
    import types, builtins
    main = types.ModuleType("__main__")
    main.__builtins__ = builtins
    sys.modules["__main__"] = main
    g = main.__dict__
    status = 0
    try:
        exec(compile(argv[2], "<string>", "exec"), g)
    except SystemExit as e:
        if e.code is None:
            status = 0
        elif isinstance(e.code, int):
            status = e.code
        else:
            print(e.code, file=sys.stderr)
            status = 1
    except BaseException:
        import traceback
        traceback.print_exc()
        status = 1
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except Exception:
        pass
    os._exit(status & 0xFF)

# Shows argv as the process's command line (/proc/PID/cmdline, ps), as an
# exec of it would, in the bytes that held the fork server's own (its
# script: long enough for a kernel's arguments; longer ones are cut).
def _ipybox_set_cmdline(argv):
    import ctypes
    try:
        with open("/proc/self/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        start, end = int(fields[45]), int(fields[46])
    except (OSError, IndexError, ValueError):
        return
    data = b"\0".join(a.encode("utf-8", "surrogateescape") for a in argv)[: end - start - 1]
    ctypes.memset(start, 0, end - start)
    ctypes.memmove(start, data, len(data))

# The sandbox fork server (see zygote_join_linux.go). It imports what a
# kernel imports, as zygote.py does, but it never forks a kernel for the
# host: it only joins sandboxes that bwrap has already built. A request
# is {"id", "uid", "gid", "n"} on fd 3, with SCM_RIGHTS carrying n
# namespace descriptors in the order to join them, then the sandbox
# init's setup socket and its report socket. No request carries anything
# of a session (no environment, no argument, no path), so a fork's
# memory holds nothing of its siblings. The child (C) leads its own
# process group, dies with the fork server, drops its supplementary
# groups, joins the namespaces, takes the sandbox's uid and gid, drops
# every capability, forks the kernel (G), which is born in the sandbox's
# pid namespace, writes G's pid on a pipe to the fork server, and exits.
# The fork server, a child subreaper, inherits G, keeps the init's report
# socket (which G closes first thing), and reports G's wait status on it
# when it reaps G. G then gets everything of its session from the init
# (sbchild.py). Before its first request, the fork server builds the
# IPython shell that its kernels adopt (shelltemplate.py), from nothing
# of any session.
#ipybox:include nocwd.py
#ipybox:include freshsignals.py
#ipybox:include untrace.py
import os, sys, json, socket, signal, select, ctypes, random, struct
#ipybox:include importguard.py
from ipykernel import kernelapp as _app
import IPython, ipykernel.ipkernel, ipykernel.zmqshell, zmq, tornado.ioloop, IPython.extensions.storemagic, faulthandler
#ipybox:include importguard_end.py
#ipybox:include boundstreams.py
#ipybox:include idletrim.py
#ipybox:include confine.py
#ipybox:include sbchild.py
#ipybox:include shelltemplate.py
_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long
_sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET, fileno=3)
_rd, _wr = os.pipe()
os.set_blocking(_wr, False)
signal.set_wakeup_fd(_wr)
signal.signal(signal.SIGCHLD, lambda *a: None)
signal.signal(signal.SIGINT, signal.SIG_IGN)
if _libc.prctl(36, 1, 0, 0, 0) != 0:  # PR_SET_CHILD_SUBREAPER: each C's G is ours once C exits
    raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER)")
_base_path = list(sys.path)
_template = _ipybox_shell_template()
# The definitions of ipybox's kernel init code (pyruntime.Preload), which
# every kernel forked from here then shares.
#ipybox:include kernelinit
#ipybox:include cowfreeze.py
def _send(obj):
    try:
        _sock.send(json.dumps(obj).encode())
    except OSError:
        pass
def _report(fd, obj):
    try:
        os.write(fd, json.dumps(obj).encode())
    except OSError:
        pass
def _drop_caps():
    PR_CAPBSET_DROP, PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL = 24, 47, 4
    for cap in range(64):
        if _libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
            if ctypes.get_errno() == 22:  # EINVAL: past the last capability
                break
            raise OSError(ctypes.get_errno(), "drop capability %d from the bounding set" % cap)
    _libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    hdr = struct.pack("=Ii", 0x20080522, 0)
    data = bytes(24)
    if _libc.capset(ctypes.c_char_p(hdr), ctypes.c_char_p(data)) != 0:
        raise OSError(ctypes.get_errno(), "capset")
def _join(req, ns, setup, rep, pw):
    # C: outside the sandbox's pid namespace, never runs user code.
    os.setpgid(0, 0)
    _libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG: die with the fork server
    if os.getppid() == 1:
        os._exit(1)
    signal.set_wakeup_fd(-1)
    _ipybox_fresh_signals()
    _sock.close(); os.close(_rd); os.close(_wr)
    for fd in _reports.values():
        os.close(fd)
    for fd in _pipes:
        os.close(fd)
    # The kernel forked below can read this process's objects (gc): the
    # fork server's bookkeeping names its sibling kernels (host pids).
    _reports.clear(); _pipes.clear(); _kids.clear(); _early.clear()
    try:
        if os.geteuid() == 0:
            os.setgroups([])
        for fd in ns:
            if _libc.setns(fd, 0) != 0:
                e = ctypes.get_errno()
                raise OSError(e, "setns: %s" % os.strerror(e))
            os.close(fd)
        os.setresgid(req["gid"], req["gid"], req["gid"])
        os.setresuid(req["uid"], req["uid"], req["uid"])
        _drop_caps()
        os.chdir("/")
        pid = os.fork()
    except BaseException as e:
        _report(rep, {"error": "join the sandbox: %s" % e})
        os._exit(1)
    if pid == 0:
        os.close(rep)
        os.close(pw)
        try:
            _ipybox_sandbox_child(setup)
        finally:
            os._exit(1)
    os.write(pw, b"%d" % pid)
    os._exit(0)
_kids = set()       # the Cs
_reports = {}       # G's pid: the init's report socket
_pipes = {}         # a C's pipe: the init's report socket, until C writes G's pid
_early = {}         # G's pid: its wait status, when reaped before its C's pipe was read
def _reaped(pid, status):
    if pid in _kids:
        _kids.discard(pid)
        _send({"exit": pid, "status": status})
        return
    rep = _reports.pop(pid, None)
    if rep is None:
        # A G whose C's pipe is still unread, or a process a kernel made
        # our child (clone with CLONE_PARENT) and not a kernel at all:
        # kept only while a fork is pending (_piped forgets the rest), so
        # that such strays neither grow this table nor leave an exit for
        # a later kernel that gets the same pid.
        if _pipes:
            _early[pid] = status
        return
    _report(rep, {"exit": status})
    os.close(rep)
def _piped(pr):
    # C wrote G's pid, or exited without (it reported its error itself).
    rep = _pipes.pop(pr)
    try:
        data = os.read(pr, 32)
    except OSError:
        data = b""
    os.close(pr)
    if not data:
        os.close(rep)
        if not _pipes:
            _early.clear()
        return
    g = int(data)
    if g in _early:
        _report(rep, {"exit": _early.pop(g)})
        os.close(rep)
    else:
        _reports[g] = rep
    if not _pipes:
        _early.clear()
_send({"id": 0})
while True:
    # poll, not select: the pipes' descriptors may pass FD_SETSIZE.
    _poll = select.poll()
    for fd in [_sock.fileno(), _rd] + list(_pipes):
        _poll.register(fd, select.POLLIN)
    try:
        r = {fd for fd, _ in _poll.poll()}
    except InterruptedError:
        continue
    if _rd in r:
        try:
            os.read(_rd, 512)
        except BlockingIOError:
            pass
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            if not _ipybox_stopped(pid, status):
                _reaped(pid, status)
    for pr in r:
        if pr in _pipes:
            _piped(pr)
    if _sock.fileno() in r:
        try:
            data, anc, _, _ = _sock.recvmsg(1 << 16, socket.CMSG_SPACE(4 * 16))
        except InterruptedError:
            continue
        except OSError:
            data = b""
        if not data:
            for pid in _kids:
                try:
                    os.killpg(pid, signal.SIGKILL)
                except OSError:
                    pass
            os._exit(0)
        fds = []
        for level, kind, payload in anc:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                fds += list(memoryview(payload).cast("i"))
        try:
            req = json.loads(data)
            n = int(req["n"])
            if len(fds) != n + 2 or n < 1:
                raise ValueError("want %d descriptors, got %d" % (n + 2, len(fds)))
        except Exception as e:
            for f in fds: os.close(f)
            _send({"id": -1, "error": "bad request: %s" % e})
            continue
        pr = pw = -1
        try:
            pr, pw = os.pipe()
            pid = os.fork()
        except OSError as e:
            for f in fds + [pr, pw]:
                if f >= 0: os.close(f)
            _send({"id": req["id"], "error": "fork: %s" % e})
            continue
        if pid == 0:
            try:
                os.close(pr)
                _join(req, fds[:n], fds[n], fds[n + 1], pw)
            finally:
                os._exit(1)
        os.close(pw)
        for f in fds[:n + 1]: os.close(f)
        _pipes[pr] = fds[n + 1]
        _kids.add(pid)
        _send({"id": req["id"], "pid": pid})

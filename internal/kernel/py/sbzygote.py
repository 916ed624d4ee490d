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
# every capability, and forks the kernel (G), which is born in the
# sandbox's pid namespace; C stays outside only to report G's wait
# status to the init, on the report socket, which G closes first thing.
# G then gets everything of its session from the init (sbchild.py).
#ipybox:include nocwd.py
import os, sys, json, socket, signal, select, ctypes, random, struct
#ipybox:include importguard.py
from ipykernel import kernelapp as _app
import IPython, ipykernel.ipkernel, ipykernel.zmqshell, zmq, tornado.ioloop
#ipybox:include importguard_end.py
#ipybox:include boundstreams.py
#ipybox:include confine.py
#ipybox:include sbchild.py
_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long
_sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET, fileno=3)
_rd, _wr = os.pipe()
os.set_blocking(_wr, False)
signal.set_wakeup_fd(_wr)
signal.signal(signal.SIGCHLD, lambda *a: None)
signal.signal(signal.SIGINT, signal.SIG_IGN)
_base_path = list(sys.path)
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
def _join(req, ns, setup, rep):
    # C: outside the sandbox's pid namespace, never runs user code.
    os.setpgid(0, 0)
    _libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG: die with the fork server
    if os.getppid() == 1:
        os._exit(1)
    signal.set_wakeup_fd(-1)
    for s in (signal.SIGCHLD, signal.SIGINT, signal.SIGTERM, signal.SIGPIPE):
        signal.signal(s, signal.SIG_DFL)
    _sock.close(); os.close(_rd); os.close(_wr)
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
        try:
            _ipybox_sandbox_child(setup)
        finally:
            os._exit(1)
    os.close(setup)
    while True:
        try:
            _, status = os.waitpid(pid, 0)
            break
        except InterruptedError:
            continue
        except ChildProcessError:
            status = 9
            break
    _report(rep, {"exit": status})
    os._exit(0)
_kids = set()
_send({"id": 0})
while True:
    try:
        r, _, _ = select.select([_sock, _rd], [], [])
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
            _kids.discard(pid)
            _send({"exit": pid, "status": status})
    if _sock in r:
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
        try:
            pid = os.fork()
        except OSError as e:
            for f in fds: os.close(f)
            _send({"id": req["id"], "error": "fork: %s" % e})
            continue
        if pid == 0:
            try:
                _join(req, fds[:n], fds[n], fds[n + 1])
            finally:
                os._exit(1)
        for f in fds: os.close(f)
        _kids.add(pid)
        _send({"id": req["id"], "pid": pid})

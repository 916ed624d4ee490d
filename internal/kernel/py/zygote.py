# The fork server. It imports what a kernel imports, with the modules
# importguard.py names kept out as launch.py does; each child then
# launches the kernel app. The protocol is one JSON object per
# SOCK_SEQPACKET record on fd 3: requests carry the kernel's argv, env,
# cwd and PYTHONPATH, and the descriptor of its output; replies carry the
# pid or an error; exit reports carry a pid and its wait status. The
# zygote stays single-threaded, so fork is safe.
#ipybox:include nocwd.py
#ipybox:include freshsignals.py
#ipybox:include untrace.py
#ipybox:include confine.py
import os, sys, json, socket, signal, select, ctypes, random
#ipybox:include importguard.py
from ipykernel import kernelapp as _app
import IPython, ipykernel.ipkernel, ipykernel.zmqshell, zmq, tornado.ioloop, IPython.extensions.storemagic, faulthandler
#ipybox:include importguard_end.py
#ipybox:include boundstreams.py
#ipybox:include idletrim.py
_libc = ctypes.CDLL(None, use_errno=True)
_sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET, fileno=3)
_rd, _wr = os.pipe()
os.set_blocking(_wr, False)
signal.set_wakeup_fd(_wr)
signal.signal(signal.SIGCHLD, lambda *a: None)
signal.signal(signal.SIGINT, signal.SIG_IGN)
_base_path = list(sys.path)
# The definitions of ipybox's kernel init code (pyruntime.Preload), which
# every kernel forked from here then shares.
#ipybox:include kernelinit
#ipybox:include cowfreeze.py
def _send(obj):
    try:
        _sock.send(json.dumps(obj).encode())
    except OSError:
        pass  # the host is gone: the next receive sees EOF
def _child(req, out):
    os.setpgid(0, 0)
    _libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG: die with the zygote
    if os.getppid() == 1:
        os._exit(1)
    signal.set_wakeup_fd(-1)
    _ipybox_fresh_signals()
    _sock.close(); os.close(_rd); os.close(_wr)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0); os.dup2(out, 1); os.dup2(out, 2)
    os.close(devnull); os.close(out)
    os.chdir(req["cwd"] or "/")
    os.environ.clear()
    for kv in req["env"]:
        k, _, v = kv.partition("=")
        os.environ[k] = v
    _ipybox_confine()
    sys.path[:] = list(req["pythonpath"] or []) + [p for p in _base_path if p]
    random.seed()
    sys.argv = ["ipykernel_launcher"] + list(req["argv"])
    _app.launch_new_instance()
    os._exit(0)
_kids = set()
def _kill_kids():
    for pid in _kids:
        try:
            os.killpg(pid, signal.SIGKILL)
        except OSError:
            pass
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
            if _ipybox_stopped(pid, status):
                continue
            _kids.discard(pid)
            _send({"exit": pid, "status": status})
    if _sock in r:
        try:
            data, anc, _, _ = _sock.recvmsg(1 << 20, socket.CMSG_SPACE(4))
        except InterruptedError:
            continue
        except OSError:
            data = b""
        if not data:
            # The host is gone (or closed us): so are its kernels, with
            # whatever they started.
            _kill_kids()
            os._exit(0)
        fds = []
        for level, kind, payload in anc:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                fds += list(memoryview(payload).cast("i"))
        try:
            req = json.loads(data)
            out = fds[0]
        except Exception as e:
            for f in fds: os.close(f)
            _send({"id": -1, "error": "bad request: %s" % e})
            continue
        try:
            pid = os.fork()
        except OSError as e:
            os.close(out)
            _send({"id": req["id"], "error": "fork: %s" % e})
            continue
        if pid == 0:
            try:
                _child(req, out)
            finally:
                os._exit(1)
        os.close(out)
        _kids.add(pid)
        _send({"id": req["id"], "pid": pid})

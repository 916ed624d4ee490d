"""Fork of a live kernel (Executor.Fork), done by the kernel itself.

fork(req) runs in a silent cell of the source kernel, on its main thread,
between cells. It forks once (a thread of the source reaps the copy when
it ends) and publishes the copy's pid as a display of REPORT_MIME. The
copy becomes a new kernel on the connection file that req names, with
the source's user namespace:

- only the calling thread survives a fork: ipykernel's iopub, heartbeat
  and control threads, and ZeroMQ's I/O threads, are gone. Their objects
  (the old app, kernel, shell, sockets and context) are kept referenced in
  _ABANDONED and never closed: closing would talk to threads that do not
  exist, and the descriptors are shared with the source. The process ends
  with os._exit, so no finalizer of theirs runs;
- every inherited socket and anonymous-inode descriptor (the old ZeroMQ
  channels, their epoll and eventfd, sockets of user code) is closed;
  regular files and pipes stay, shared with the source as os.fork shares
  them;
- the environment is replaced by req's (a new tool-server URL and token),
  the working directory and sys.path set, pooled tool connections dropped;
- random and numpy's global generator are reseeded from os.urandom, unless
  req["keep_random"];
- a new lifeline is opened from req["lifeline"] (a /proc path to the
  host's pipe), so that the fork dies with the host and not with its
  source; the fork leads a session of its own.
"""

import json
import os
import sys

REPORT_MIME = "application/x-ipybox-fork+json"
_ABANDONED = []


def _publish(report):
    from IPython.display import publish_display_data

    publish_display_data({REPORT_MIME: report})


def fork(req):
    r, w = os.pipe()
    # Not the guard of RequireShellEscape (kernel_init.py): this fork is
    # ipybox's own.
    pid = getattr(os.fork, "__ipybox_orig__", os.fork)()
    if pid == 0:
        try:
            os.close(r)
            # Its own session first, then its pid: the host checks that
            # what it adopts leads its group.
            os.setsid()
            os.write(w, str(os.getpid()).encode())
            os.close(w)
            if req.get("wait"):
                _checkpoint(req)
            else:
                _become(req, _lifeline_fd(req))
        except BaseException:
            import traceback

            traceback.print_exc()
        finally:
            os._exit(1)
    os.close(w)
    data = b""
    while True:
        chunk = os.read(r, 64)
        if not chunk:
            break
        data += chunk
    os.close(r)
    # One fork, not two (a fork of a large kernel costs milliseconds per
    # GiB): the copy stays this kernel's child, reaped by a thread here,
    # so that it never lingers as a zombie; it leads a session of its own,
    # so that nothing aimed at this kernel's group reaches it.
    import threading

    threading.Thread(target=_reap, args=(pid,), name="ipybox-fork-reaper", daemon=True).start()
    _publish({"pid": int(data or b"0")})


def _reap(pid):
    try:
        os.waitpid(pid, 0)
    except OSError:
        pass


def _lifeline_fd(req):
    if not req.get("lifeline"):
        return -1
    return os.open(req["lifeline"], os.O_RDONLY | os.O_CLOEXEC)


def _watch(fd):
    import signal
    import threading

    if fd < 0:
        return

    def watch():
        while True:
            try:
                if not os.read(fd, 64):
                    break
            except InterruptedError:
                continue
            except OSError:
                break
        try:
            os.killpg(0, signal.SIGKILL)
        except OSError:
            pass
        os._exit(1)

    threading.Thread(target=watch, name="ipybox-lifeline", daemon=True).start()


def _checkpoint(req):
    """A kept cell boundary (Executor.Rewind): the copy waits, stopped
    in effect, reading its lifeline. The host writes one JSON line there to
    wake it into a kernel (a rewind), or closes the pipe to end it."""
    fd = _lifeline_fd(req)
    _detach(fd)
    line = b""
    while not line.endswith(b"\n"):
        try:
            chunk = os.read(fd, 65536)
        except InterruptedError:
            continue
        if not chunk:
            os._exit(0)
        line += chunk
    _become(json.loads(line), fd, detached=True)


def _close_inherited(keep):
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        if fd <= 2 or fd in keep:
            continue
        try:
            target = os.readlink("/proc/self/fd/" + name)
        except OSError:
            continue
        if target.startswith("socket:") or target.startswith("anon_inode:"):
            try:
                os.close(fd)
            except OSError:
                pass


def _reseed():
    import random

    random.seed()
    np = sys.modules.get("numpy")
    if np is not None:
        try:
            np.random.seed()
        except Exception:
            pass


def _detach(life):
    """Let go of what the copy shares with its source: output capture,
    sockets, signal handlers."""
    import signal

    # The kernel's own output (not cell output) goes nowhere: the source's
    # output pipe is the source's, and holding it would hold the host's
    # wait for the source's exit, and kill the copy with SIGPIPE once the
    # host stops reading it.
    for stream in (sys.stdout, sys.stderr):
        orig = getattr(stream, "_original_stdstream_copy", None)
        if orig is not None and orig > 2:
            try:
                os.close(orig)
            except OSError:
                pass
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    os.close(null)
    _ABANDONED.append((sys.stdout, sys.stderr))
    sys.stdout, sys.stderr = sys.__stdout__, sys.__stderr__
    _close_inherited({life})
    for s in (signal.SIGCHLD, signal.SIGTERM, signal.SIGPIPE):
        signal.signal(s, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)


def _become(req, life, detached=False):
    import asyncio

    if not detached:
        _detach(life)
    _watch(life)
    old_pp = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    os.environ.clear()
    for kv in req["env"]:
        k, _, v = kv.partition("=")
        os.environ[k] = v
    new_pp = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    sys.path[:] = new_pp + [p for p in sys.path if p not in old_pp and p not in new_pp]
    os.chdir(req.get("cwd") or "/")
    rt = sys.modules.get("ipybox_runtime")
    if rt is not None:
        import threading

        rt._local = threading.local()
        rt._executor = None
    if not req.get("keep_random"):
        _reseed()

    from ipykernel.kernelapp import IPKernelApp

    old = IPKernelApp.instance()
    shell = old.shell
    ns = shell.user_ns
    _ABANDONED.append((old, old.kernel, shell, asyncio.get_event_loop()))
    type(shell).clear_instance()
    type(old.kernel).clear_instance()
    IPKernelApp.clear_instance()
    # The source's event loop is mid-request on this stack, and stays so:
    # the new kernel runs a loop of its own, nested, and never returns.
    asyncio.events._set_running_loop(None)
    asyncio.set_event_loop(asyncio.new_event_loop())
    sys.argv = ["ipykernel_launcher"] + list(req["argv"])
    # The module too, not only its dict: cells run with the module's dict
    # as their globals, so functions defined in the copy see the source's
    # names, and dill (snapshots) finds them in __main__.
    from traitlets.config import Config

    cfg = Config()
    cfg.IPythonKernel.user_module = shell.user_module
    # The source's names are the user's, not the app's start-up names:
    # hidden, %who and snapshots would skip them.
    cfg.IPKernelApp.hide_initial_ns = False
    app = IPKernelApp.instance(user_ns=ns, config=cfg)
    app.initialize(list(req["argv"]))
    app.start()
    os._exit(0)


def request(data):
    """fork(json.loads(data)): the host passes one JSON literal."""
    fork(json.loads(data))

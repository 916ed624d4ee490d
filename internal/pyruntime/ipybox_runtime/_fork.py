"""Fork of a live kernel (Executor.Fork), done by the kernel itself.

fork(req) runs in a silent cell of the source kernel, on its main thread,
between cells. It forks once (a thread of the source reaps the copy when
it ends), makes the copy lead a process group of its own, and publishes
its pid as a display of REPORT_MIME without waiting for it. The copy
becomes a kernel on the connection file that req names, with the
source's user namespace:

- only the calling thread survives a fork: ipykernel's iopub, heartbeat
  and control threads, and ZeroMQ's I/O threads, are gone. Their objects
  (the old context, sockets, threads, kernel and output streams) are kept
  referenced in _ABANDONED and never closed: closing would talk to
  threads that do not exist. The process ends with os._exit, so no
  finalizer of theirs runs;
- every inherited socket and anonymous-inode descriptor (the old ZeroMQ
  channels, their epoll and eventfd, sockets of user code) becomes
  /dev/null: closed to the source, its number kept from reuse; regular
  files and pipes stay, shared with the source as os.fork shares them;
- the environment is replaced by req's (a new tool-server URL and token),
  the working directory and sys.path set, pooled tool connections dropped;
- random and numpy's global generator are reseeded from os.urandom, unless
  req["keep_random"];
- a new lifeline is opened from req["lifeline"] (a /proc path to the
  host's pipe), so that the fork dies with the host and not with its
  source;
- the source's app, kernel and shell get new channels (_rebind): a new
  context, session, sockets, threads and output streams made by the app's
  own init steps, and a new kernel object around the same shell. That
  leaves out most of a kernel start (argument parsing, configuration, a
  new shell: 70-170 ms of a fork's first result under load). An
  ipykernel other than 6 and 7 gets a new app instead (_new_app);
- ipybox's init code (req["init"]) runs in the copy, not from the host
  (kernel.Prepared): a round trip and a compile fewer.

With req["wait"] the copy is a kept cell boundary (Executor.Rewind): it
is bound at once and serves only when woken through its lifeline.
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
    # Not the guard of RequireShellEscape (kernel_init.py): this fork is
    # ipybox's own.
    pid = getattr(os.fork, "__ipybox_orig__", os.fork)()
    if pid == 0:
        try:
            os.setpgid(0, 0)
            if req.get("wait"):
                _checkpoint(req)
            else:
                _become(req, _lifeline_fd(req))
        except BaseException:
            _report_failure(req)
        finally:
            os._exit(1)
    # The copy leads a process group of its own, so that nothing aimed at
    # this kernel's group reaches it, and the host, which checks that
    # what it adopts leads its group, can adopt it at once. Both sides set
    # it (the shell's way): the report does not wait for the copy to run.
    try:
        os.setpgid(pid, pid)
    except OSError:
        pass  # it has died already: the host finds no such process
    # One fork, not two (a fork of a large kernel costs milliseconds per
    # GiB): the copy stays this kernel's child, reaped by a thread here,
    # so that it never lingers as a zombie.
    import threading

    threading.Thread(target=_reap, args=(pid,), name="ipybox-fork-reaper", daemon=True).start()
    _publish({"pid": pid})


def _report_failure(req):
    """Why the copy could not become a kernel, to the host (req["report"],
    a pipe of the host by its /proc path): the traceback's last lines, in
    one write. Its standard streams are /dev/null by now."""
    import traceback

    text = traceback.format_exc()
    try:
        fd = os.open(req["report"], os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except (KeyError, OSError):
        return
    try:
        os.write(fd, "\n".join(text.strip().splitlines()[-5:]).encode("utf-8", "replace")[-2000:])
    except OSError:
        pass
    finally:
        os.close(fd)


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
    """A kept cell boundary (Executor.Rewind): the copy becomes a kernel on
    req's connection at once, bound but not serving, and waits on its
    lifeline. A line there wakes it (a rewind: the host swaps it in and
    connects); the pipe's end ends it."""
    fd = _lifeline_fd(req)
    _prepare(req, fd)
    app, rebound = _bind(req)
    if not rebound:
        # A new shell: ipybox's init, as the host runs it after a start.
        # A rebound one has it, with this kernel's very settings.
        _run_init(req)
    line = b""
    while not line.endswith(b"\n"):
        try:
            chunk = os.read(fd, 64)
        except InterruptedError:
            continue
        if not chunk:
            os._exit(0)
        line += chunk
    _watch(fd)
    _serve(app)


def _close_inherited(keep, null):
    """Every inherited socket and anonymous inode (ZeroMQ's channels,
    epoll and eventfd, the event loop's, user code's sockets) becomes
    /dev/null: closed to the source, and its number stays taken, so that
    an abandoned object that still writes to it (a dead ZeroMQ socket's
    signaller, a log handler) never writes into a new channel that
    reused the number."""
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
                os.dup2(null, fd)
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
    # host stops reading it. Its copies too (ipykernel's log handler
    # writes to one), as /dev/null, not closed (see _close_inherited).
    null = os.open(os.devnull, os.O_RDWR | os.O_CLOEXEC)
    for stream in (sys.stdout, sys.stderr):
        orig = getattr(stream, "_original_stdstream_copy", None)
        if orig is not None and orig > 2:
            try:
                os.dup2(null, orig)
            except OSError:
                pass
    for fd in (0, 1, 2):
        os.dup2(null, fd, inheritable=True)
    _ABANDONED.append((sys.stdout, sys.stderr))
    sys.stdout, sys.stderr = sys.__stdout__, sys.__stderr__
    _close_inherited({life, null}, null)
    os.close(null)
    for s in (signal.SIGCHLD, signal.SIGTERM, signal.SIGPIPE):
        signal.signal(s, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)


def _become(req, life):
    _prepare(req, life)
    _watch(life)
    app, _ = _bind(req)
    _run_init(req)
    _serve(app)


def _prepare(req, life):
    """The copy's process state: detached from the source, with req's
    environment, working directory and (unless keep_random) random state."""
    _detach(life)
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


def _bind(req):
    """The copy's kernel, bound to req's connection file, not yet serving.
    The source's cell is still on this stack, its event loop running:
    the kernel gets a new loop of its own, nested, that never returns."""
    import asyncio

    asyncio.events._set_running_loop(None)
    asyncio.set_event_loop(asyncio.new_event_loop())
    rebound = not req.get("new_app") and _can_rebind()
    app = _rebind(req) if rebound else _new_app(req)
    return app, rebound


def _can_rebind():
    """Whether this ipykernel is one whose app _rebind knows (6 and 7)."""
    try:
        import ipykernel
        from ipykernel.kernelapp import IPKernelApp
    except ImportError:
        return False
    if not ipykernel.version_info or ipykernel.version_info[0] not in (6, 7):
        return False
    app = IPKernelApp.initialized() and IPKernelApp.instance()
    return bool(app) and getattr(app, "kernel", None) is not None and getattr(app.kernel, "shell", None) is not None


def _conn_file(argv):
    for i, a in enumerate(argv):
        if a == "-f" and i + 1 < len(argv):
            return argv[i + 1]
        if a.startswith("--f=") or a.startswith("--IPKernelApp.connection_file="):
            return a.split("=", 1)[1]
    raise ValueError("fork: no connection file in %r" % (argv,))


def _rebind(req):
    """The source's app, kernel and shell, on new channels: a new ZeroMQ
    context, session (req's key), sockets, threads and output streams,
    made by the app's own init steps, and a new kernel object around the
    same shell (its namespace, hooks, magics and ipybox's init stay).
    This is most of a kernel start's work left out: no argument parsing,
    configuration or profile, and no new shell."""
    from ipykernel.kernelapp import IPKernelApp
    from jupyter_client.session import Session

    app = IPKernelApp.instance()
    shell = app.kernel.shell
    _ABANDONED.append(
        {k: getattr(app, k, None) for k in (
            "context", "session", "kernel", "heartbeat", "iopub_thread", "iopub_socket",
            "control_thread", "shell_channel_thread", "shell_socket", "stdin_socket",
            "control_socket", "debugpy_socket", "debug_shell_socket", "displayhook", "poller")}
    )
    app.context = None
    app.poller = None  # it would watch the source, the copy's parent
    app.session = Session(parent=app)
    app.connection_file = _conn_file(req["argv"])
    for name in ("shell_port", "iopub_port", "stdin_port", "control_port", "hb_port"):
        setattr(app, name, 0)
    app.load_connection_file()
    app.init_sockets()
    app.init_heartbeat()
    app.init_io()
    app.init_signal()
    type(app.kernel).clear_instance()
    app.init_kernel()  # the shell singleton is kept: the new kernel takes it
    shell.kernel = app.kernel
    if getattr(shell, "_data_pub", None) is not None:
        shell._data_pub = None
    _reset_script_magics(shell)
    # The source's cell is still on the stack with the shell's display
    # trap set: its hook, not the app's, shows a cell's last value.
    sys.displayhook = shell.displayhook
    return app


def _reset_script_magics(shell):
    """%%bash and the other script magics run their processes on an event
    loop of their own, in a thread: in the copy the thread is gone and the
    loop's descriptors are /dev/null. They make a new one when they find
    none. Their background processes (%%bash --bg) are the source's."""
    sm = shell.magics_manager.registry.get("ScriptMagics")
    if sm is None:
        return
    fin = getattr(sm, "_event_loop_finalizer", None)  # IPython 9
    if fin is not None:
        fin.detach()
        sm._event_loop_finalizer = None
    if getattr(sm, "event_loop", None) is not None:
        _ABANDONED.append(sm.event_loop)
        sm.event_loop = None
    if hasattr(sm, "bg_processes"):
        sm.bg_processes = []


def _new_app(req):
    """A new IPKernelApp with the source's namespace and a new shell (an
    ipykernel that _rebind does not know)."""
    from ipykernel.kernelapp import IPKernelApp
    from traitlets.config import Config

    old = IPKernelApp.instance()
    shell = old.shell
    ns = shell.user_ns
    _ABANDONED.append((old, old.kernel, shell))
    type(shell).clear_instance()
    type(old.kernel).clear_instance()
    IPKernelApp.clear_instance()
    sys.argv = ["ipykernel_launcher"] + list(req["argv"])
    # The module too, not only its dict: cells run with the module's dict
    # as their globals, so functions defined in the copy see the source's
    # names, and dill (snapshots) finds them in __main__.
    cfg = Config()
    cfg.IPythonKernel.user_module = shell.user_module
    # The source's names are the user's, not the app's start-up names:
    # hidden, %who and snapshots would skip them.
    cfg.IPKernelApp.hide_initial_ns = False
    app = IPKernelApp.instance(user_ns=ns, config=cfg)
    app.initialize(list(req["argv"]))
    return app


def _run_init(req):
    """ipybox's init code, which the host runs after a start, and not for
    a copy (kernel.Prepared): the fork's own settings (its runtime folder,
    its package folder) in a kept shell, where it is idempotent, or all of
    it in a new one."""
    code = req.get("init")
    if code:
        from IPython import get_ipython

        exec(code, {"get_ipython": get_ipython})


def _serve(app):
    app.start()
    os._exit(0)


def request(data):
    """fork(json.loads(data)): the host passes one JSON literal."""
    fork(json.loads(data))

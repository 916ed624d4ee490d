# ipybox kernel init. Runs once after every kernel (re)start, silently, in a
# private namespace: nothing defined here lands in the user's namespace.
# ipybox calls setup(config) with a dict built by the Go side.


def setup(config):
    import os
    import sys

    ip = get_ipython()  # noqa: F821 (provided by the caller's namespace)

    # Colours off: agents read plain text. Not again where every part that
    # colours (the shell, its two traceback handlers, the inspector) is
    # off already, as a kernel's arguments ask: a forked kernel's start
    # then copies 0.1 MB less. A session fork keeps its source's handlers,
    # which kernel code may have coloured without the shell's setting.
    def scheme(table):
        return str(getattr(table, "active_scheme_name", "")).lower()

    try:
        if not (
            str(getattr(ip, "colors", "")).lower() == "nocolor"
            and scheme(getattr(ip.InteractiveTB, "color_scheme_table", None)) == "nocolor"
            and scheme(getattr(ip.SyntaxTB, "color_scheme_table", None)) == "nocolor"
            and scheme(getattr(ip.inspector, "color_table", None)) == "nocolor"
        ):
            ip.run_line_magic("colors", "nocolor")
    except Exception:
        pass

    # input() without an input handler: say what to do instead of hanging.
    # (ipykernel raises StdinNotImplementedError; its message is kept.)

    workdir = config.get("workdir")
    if workdir:

        def _ipybox_restore_cwd(*_args):
            try:
                cur = os.getcwd()
            except OSError:
                cur = None
            if cur != workdir:
                try:
                    os.chdir(workdir)
                except OSError:
                    return
                print(f"[ipybox] cwd reset to {workdir}")

        # One hook: a forked kernel keeps its source's shell and runs this
        # again (ipybox_runtime._fork).
        for cb in list(ip.events.callbacks.get("post_run_cell", [])):
            if getattr(cb, "__name__", "") == "_ipybox_restore_cwd":
                ip.events.unregister("post_run_cell", cb)
        ip.events.register("post_run_cell", _ipybox_restore_cwd)

    for p in reversed(config.get("sys_path") or []):
        if p not in sys.path:
            sys.path.insert(0, p)
    if os.environ.get("PYTHONUSERBASE") and os.environ.get("PIP_USER"):
        # The session's package folder (Options.PackageDir): pip installs
        # there; make its site-packages exist and be on sys.path now, so
        # that what pip installs imports without a restart.
        import site

        # From the environment, not site's cache: a kernel forked from the
        # fork server imported site before it had this environment.
        site.USER_BASE = os.environ["PYTHONUSERBASE"]
        site.USER_SITE = None
        user_site = site.getusersitepackages()
        try:
            os.makedirs(user_site, exist_ok=True)
        except OSError:
            pass
        if user_site not in sys.path:
            site.addsitedir(user_site)
    end = config.get("sys_path_end")
    if end:
        for p in [""] + end:
            while p in sys.path:
                sys.path.remove(p)
        # One finder: a forked kernel runs this again (ipybox_runtime._fork).
        sys.meta_path[:] = [f for f in sys.meta_path if type(f).__name__ != "_WorkspaceFinder"]
        sys.meta_path.append(_WorkspaceFinder(end, ip.user_ns))
        _safe_pip_magic(ip)

    if config.get("remote"):
        from ipybox_runtime import _remote

        _remote.setup()

    if config.get("shell_approval") or config.get("require_shell_escape"):
        _install_shell_hooks(ip, config)


class _WorkspaceFinder:
    """Imports top-level modules from the workspace, last, and only for
    the user's own code: the cells (whose globals are the user's
    namespace) and modules that live in the workspace. The standard
    library and installed packages never import from it, not even a
    module they would import only if it were there (Pillow tries cffi,
    pickle5, backports_abc): sessions share the workspace, and one
    session's cffi.py would otherwise run in another's kernel when it
    draws a plot."""

    def __init__(self, dirs, user_ns):
        import os

        self.dirs = list(dirs)
        self.real = [os.path.realpath(d) + os.sep for d in dirs]
        self.user_ns = user_ns

    def find_spec(self, name, path=None, target=None):
        if path is not None or "." in name:
            return None  # a submodule: its package decides
        if not self._user_code():
            return None
        from importlib.machinery import PathFinder

        return PathFinder.find_spec(name, self.dirs)

    def _user_code(self):
        import os
        import sys

        f = sys._getframe(2)
        while f is not None:
            fn = f.f_code.co_filename
            if fn.startswith("<frozen importlib") or fn.endswith(os.sep + "importlib" + os.sep + "__init__.py"):
                f = f.f_back
                continue
            if f.f_globals is self.user_ns:
                return True
            if not os.path.isabs(fn):
                # exec'd or compiled text ("<string>", "<doctest ...>"):
                # whose it is, is its caller's (a relative name would
                # otherwise resolve into the working directory).
                f = f.f_back
                continue
            real = os.path.realpath(fn)
            return any(real.startswith(d) for d in self.real)
        return False


def _safe_pip_magic(ip):
    """%pip runs "python -m pip", which puts the working directory first on
    its sys.path: a textwrap.py that another session left in the shared
    workspace would run in this session's pip. -P (Python 3.11) keeps the
    working directory off; older interpreters keep IPython's own %pip."""
    import shlex
    import sys

    if sys.version_info < (3, 11):
        return

    def pip(line):
        """Run pip in the kernel's interpreter, without the working
        directory on its path (see ipybox's kernel init)."""
        ip.system(" ".join([shlex.quote(sys.executable), "-P", "-m", "pip", line]))

    ip.register_magic_function(pip, "line", "pip")


def _install_shell_hooks(ip, config):
    """Routes IPython's shell escapes through approval, and optionally guards
    the Python-level ways of starting processes.

    Every hook expands the command exactly once, in the caller's frame, as
    IPython would, asks for approval of the expanded text, and runs that very
    text without a second expansion: what the application approves is byte
    for byte what runs.
    """
    import os
    import subprocess

    from IPython.utils import process as _process
    from IPython.utils.text import LSString, SList

    approve = config.get("shell_approval")
    # While an approved command runs, the process guards stand aside. The
    # count is process-wide, not per thread, because IPython runs script
    # magics on an event loop in another thread; the guards are no security
    # boundary, so the window this opens for other threads is acceptable.
    allowed = _AllowCount()

    def ask(command):
        if approve:
            import ipybox_runtime

            ipybox_runtime.approve_shell(command)

    class _Allowed:
        def __enter__(self):
            allowed.add(1)

        def __exit__(self, *exc):
            allowed.add(-1)

    # The originals, not a wrapper of an earlier init: a forked kernel
    # (ipybox_runtime._fork) runs this again in a process whose modules
    # this init already wrapped, and wrapping twice would ask twice.
    _orig = {"call": _unwrapped(subprocess.call), "system": _unwrapped(_process.system), "getoutput": _unwrapped(_process.getoutput)}

    def system_piped(cmd):
        __tracebackhide__ = True
        # depth=2: the frame that called the class-level hook, as in IPython.
        expanded = ip.var_expand(cmd, depth=2)
        if expanded.rstrip().endswith("&"):
            raise OSError("Background processes not supported.")
        ask(expanded)
        with _Allowed():
            ip.user_ns["_exit_code"] = _orig["system"](expanded)

    def system_raw(cmd):
        __tracebackhide__ = True
        expanded = ip.var_expand(cmd, depth=2)
        ask(expanded)
        with _Allowed():
            try:
                ec = _orig["call"](expanded, shell=True, executable=os.environ.get("SHELL"))
            except KeyboardInterrupt:
                print("\n" + ip.get_exception_only(), file=sys.stderr)
                ec = 130
        if ec > 128:
            ec = -(ec - 128)
        ip.user_ns["_exit_code"] = ec

    def getoutput(cmd, split=True, depth=0):
        __tracebackhide__ = True
        expanded = ip.var_expand(cmd, depth=depth + 1)
        if expanded.rstrip().endswith("&"):
            raise OSError("Background processes not supported.")
        ask(expanded)
        with _Allowed():
            out = _orig["getoutput"](expanded)
        return SList(out.splitlines()) if split else LSString(out)

    from IPython.core import magic as _magic
    from IPython.core.magics import script as _script

    orig_run_cell_magic = ip.run_cell_magic
    orig_shebang = _unwrapped(_script.ScriptMagics.shebang)
    import threading

    magic_ok = threading.local()  # set while run_cell_magic runs an approved script

    def run_cell_magic(magic_name, line, cell):
        __tracebackhide__ = True
        fn = ip.find_cell_magic(magic_name)
        qual = getattr(fn, "__qualname__", "") or ""
        if fn is None or cell == "" or not qual.startswith("ScriptMagics."):
            return orig_run_cell_magic(magic_name, line, cell)
        # The same expansion IPython's run_cell_magic performs (stack_depth
        # 2 from here reaches the same frame), then the magic runs with the
        # expanded line directly, so nothing is expanded twice.
        if getattr(fn, _magic.MAGIC_NO_VAR_EXPAND_ATTR, False):
            expanded = line
        else:
            expanded = ip.var_expand(line, 2)
        header = ("%%" + magic_name + " " + expanded).rstrip()
        ask(header + "\n" + cell)
        magic_ok.on = True
        try:
            with _Allowed(), ip.builtin_trap:
                return fn(expanded, cell)
        finally:
            magic_ok.on = False

    def shebang(self, line, cell):
        # Every script magic (%%bash, %%sh, %%script, one registered at run
        # time, or ScriptMagics.shebang called directly) comes through here.
        __tracebackhide__ = True
        if getattr(magic_ok, "on", False):
            magic_ok.on = False
            return orig_shebang(self, line, cell)
        ask(("%%script " + line).rstrip() + "\n" + cell)
        with _Allowed():
            return orig_shebang(self, line, cell)

    import functools
    import types

    functools.update_wrapper(shebang, orig_shebang)  # keeps its argument parser
    shebang.__ipybox_orig__ = orig_shebang
    _script.ScriptMagics.shebang = shebang
    # The magics table holds methods bound when it was built: %%script
    # would still reach the original through it.
    for kind in ip.magics_manager.magics.values():
        for name, fn in list(kind.items()):
            if _unwrapped(getattr(fn, "__func__", None)) is orig_shebang:
                kind[name] = types.MethodType(shebang, fn.__self__)

    # Hooks at the class level, so that bound and unbound calls
    # (ip.system_raw(c), type(ip).system_raw(ip, c),
    # InteractiveShell.system_piped(ip, c)) all come through them.
    hooks = {
        "system": lambda self, cmd: system_piped(cmd),
        "system_piped": lambda self, cmd: system_piped(cmd),
        "system_raw": lambda self, cmd: system_raw(cmd),
        "getoutput": lambda self, cmd, split=True, depth=0: getoutput(cmd, split, depth + 1),
    }
    for cls in type(ip).__mro__:
        for name, hook in hooks.items():
            if name in vars(cls):
                setattr(cls, name, _named(hook, name))
    ip.run_cell_magic = run_cell_magic

    # IPython's process helpers, used directly: each asks, unless an
    # approved command is running them.
    from IPython.utils import _process_common, _process_posix

    def guard_cmd(fn):
        fn = _unwrapped(fn)

        def guarded(cmd, *args, **kwargs):
            __tracebackhide__ = True
            if allowed.depth > 0:
                return fn(cmd, *args, **kwargs)
            ask(cmd if isinstance(cmd, str) else " ".join(map(str, cmd)))
            with _Allowed():
                return fn(cmd, *args, **kwargs)

        guarded.__name__ = getattr(fn, "__name__", "guarded")
        guarded.__doc__ = getattr(fn, "__doc__", None)
        guarded.__ipybox_orig__ = fn
        return guarded

    for mod in (_process, _process_common, _process_posix):
        for name in ("system", "getoutput", "getoutputerror", "get_output_error_code", "process_handler"):
            fn = vars(mod).get(name)
            if callable(fn):
                setattr(mod, name, guard_cmd(fn))

    def guard_method(fn):
        fn = _unwrapped(fn)

        def method(self, cmd, *args, **kwargs):
            __tracebackhide__ = True
            if allowed.depth > 0:
                return fn(self, cmd, *args, **kwargs)
            ask(cmd)
            with _Allowed():
                return fn(self, cmd, *args, **kwargs)

        method.__name__ = fn.__name__
        method.__ipybox_orig__ = fn
        return method

    ph = getattr(_process_posix, "ProcessHandler", None)
    if ph is not None:
        for name in ("system", "getoutput", "getoutput_pexpect"):
            fn = vars(ph).get(name)
            if callable(fn):
                setattr(ph, name, guard_method(fn))

    if config.get("require_shell_escape"):
        _install_process_guards(allowed)


def _unwrapped(fn):
    """fn, or what an earlier run of this init wrapped in it."""
    return getattr(fn, "__ipybox_orig__", fn)


def _named(fn, name):
    fn.__name__ = fn.__qualname__ = name
    return fn


class _AllowCount:
    def __init__(self):
        import threading

        self._lock = threading.Lock()
        self.depth = 0

    def add(self, n):
        with self._lock:
            self.depth += n


def _install_process_guards(allowed):
    """Makes process creation outside ! fail with a clear error.

    This steers well-behaved code towards ! (and so towards shell approval).
    It is NOT a security boundary: ctypes, a fresh interpreter or a saved
    reference to the original functions all get around it. Confinement is the
    sandbox's job.
    """
    import os
    import pty
    import subprocess

    msg = (
        "starting processes from Python is disabled in this kernel "
        "(RequireShellEscape); run the command with !cmd instead, so that it "
        "goes through shell-command approval"
    )

    def guard(fn):
        fn = _unwrapped(fn)

        def guarded(*args, **kwargs):
            if getattr(allowed, "depth", 0) > 0:
                return fn(*args, **kwargs)
            raise PermissionError(msg)

        guarded.__name__ = getattr(fn, "__name__", "guarded")
        guarded.__doc__ = fn.__doc__
        guarded.__ipybox_orig__ = fn
        return guarded

    orig_popen_init = _unwrapped(subprocess.Popen.__init__)

    def popen_init(self, *args, **kwargs):
        if getattr(allowed, "depth", 0) > 0:
            return orig_popen_init(self, *args, **kwargs)
        raise PermissionError(msg)

    popen_init.__ipybox_orig__ = orig_popen_init
    subprocess.Popen.__init__ = popen_init
    names = ["system", "posix_spawn", "posix_spawnp", "fork", "forkpty"]
    names += [n for n in dir(os) if n.startswith(("exec", "spawn"))]
    for name in names:
        fn = getattr(os, name, None)
        if callable(fn):
            setattr(os, name, guard(fn))
    pty.spawn = guard(pty.spawn)

# The shell a forked sandboxed kernel starts with (issue 38): the sandbox
# fork server builds one ZMQInteractiveShell before it serves any
# request, so that a kernel it forks skips the shell's construction
# (about a third of a forked kernel's start, in CPU). It is built from
# the kernel's fixed arguments alone (launchArgs in kernel.go; no
# connection file, no config file, no session: the fork server never
# sees one), with IPYTHONDIR a private empty folder removed at once, and
# the fork server's environment, working directory and tempfile state
# (its folder, and its name sequence's random.Random) restored after it.
# The app that parsed those arguments is the kernel app's instance, which
# the kernel then initializes: built here, it is shared, and each forked
# kernel holds 0.35 MB less of its own.
# The kernel (sbchild.py) takes it only when its arguments are those and no config file was found for its app; it then
# sets what a cold shell takes from its session (IPython and profile
# folders, working directory, home, the environment that ipykernel's
# shell sets) before any code of the session runs. Otherwise, and in a
# `python -c` program, the template is dropped (_ipybox_drop_template),
# with the two names it added to builtins, so that nothing of it is seen.
_IPYBOX_TEMPLATE_ARGS = ["--HistoryManager.enabled=False", "--InteractiveShell.colors=NoColor", "--IPKernelApp.quiet=True"]
def _ipybox_shell_template():
    import os, sys, builtins, tempfile, shutil, threading
    try:
        import ipykernel
        from ipykernel.kernelapp import IPKernelApp
        from ipykernel.zmqshell import ZMQInteractiveShell
        from ipykernel.compiler import XCachingCompiler
    except Exception:
        return None
    if not getattr(ipykernel, "version_info", None) or ipykernel.version_info[0] != 6:
        return None
    env, cwd, tmp, names = dict(os.environ), os.getcwd(), tempfile.tempdir, tempfile._name_sequence
    added = [n for n in ("__IPYTHON__", "display") if n not in vars(builtins)]
    main = sys.modules.get("__main__")
    d = tempfile.mkdtemp(prefix="ipybox-shell-")
    try:
        os.environ["IPYTHONDIR"] = d
        app = IPKernelApp.instance()
        app.parse_command_line(["-f", "ipybox-template.json"] + _IPYBOX_TEMPLATE_ARGS)
        cli = app.cli_config
        if cli.IPKernelApp.connection_file != "ipybox-template.json" or app.extra_args:
            raise ValueError("the kernel's arguments parse unexpectedly")
        shell = ZMQInteractiveShell.instance(parent=app, profile_dir=None, user_module=None, user_ns=None, kernel=None, compiler_class=XCachingCompiler)
        # What a kernel sets when it adopts the shell: a shell that lacks
        # any of it (another IPython) is no template.
        hm = shell.history_manager
        for ok in ("ipython_dir" in shell._trait_values, hasattr(shell.logger, "home_dir"), isinstance(getattr(hm, "dir_hist", None), list),
                   hasattr(hm, "_get_hist_file_name"), hasattr(shell.db, "root"), hasattr(shell, "init_environment"), hasattr(shell, "init_virtualenv")):
            if not ok:
                raise ValueError("not a shell this template knows")
    except Exception:
        _ipybox_drop_template({"added": added, "main": main})
        return None
    finally:
        shutil.rmtree(d, ignore_errors=True)
        os.environ.clear()
        os.environ.update(env)
        os.chdir(cwd)
        # Not one random.Random more: a kernel's own are seeded afresh.
        tempfile.tempdir, tempfile._name_sequence = tmp, names
    # A cell's first transform compiles tokenize's patterns (about 9 ms
    # of CPU): done here once, not in every kernel. It reads and keeps
    # nothing but the text it is given.
    shell.transform_cell("pass\n")
    if threading.active_count() != 1:
        raise RuntimeError("the shell template started a thread; the fork server cannot fork")
    return {"shell": shell, "app": app, "added": added, "main": main, "cli": cli}
# keep_app: the kernel's app is the template's, and runs already.
def _ipybox_drop_template(t, keep_app=False):
    import sys, atexit, builtins
    if t is None:
        return
    try:
        from ipykernel.zmqshell import ZMQInteractiveShell
        shell = t.get("shell")
        if shell is not None:
            atexit.unregister(shell.atexit_operations)
        ZMQInteractiveShell.clear_instance()
        if not keep_app:
            from ipykernel.kernelapp import IPKernelApp
            IPKernelApp.clear_instance()
    except Exception:
        pass
    for n in t["added"]:
        vars(builtins).pop(n, None)
    if t.get("main") is not None:
        sys.modules["__main__"] = t["main"]
    t.clear()
def _ipybox_template_fits(t, args):
    return t is not None and "shell" in t and len(args) == 2 + len(_IPYBOX_TEMPLATE_ARGS) and args[0] == "-f" and list(args[2:]) == _IPYBOX_TEMPLATE_ARGS
# The kernel, with the template's shell: the app's own start, whose
# IPythonKernel takes the shell (a singleton) instead of building one.
def _ipybox_start_with_template(t):
    import os, sys, copy, pathlib
    from ipykernel.kernelapp import IPKernelApp
    from IPython.paths import get_ipython_dir
    from IPython.utils.path import get_home_dir
    shell = t["shell"]
    app = IPKernelApp.instance()
    if app is not t["app"]:
        raise RuntimeError("the kernel's app is not the template's")
    def parse_command_line(argv=None):
        # What parsing the kernel's arguments gives (the template's
        # arguments with this connection file), without the parsing (its
        # argparse parser and the classes' traits: about 6 ms of CPU).
        argv = sys.argv[1:] if argv is None else argv
        app.argv = list(argv)
        cli = copy.deepcopy(t["cli"])
        cli.IPKernelApp.connection_file = argv[1]
        app.cli_config = cli
        app.update_config(cli)
        app.extra_args = []
    app.parse_command_line = parse_command_line
    init_kernel = app.init_kernel
    def init_kernel_with_template():
        if getattr(app, "loaded_config_files", None) != []:
            # The session's config files may configure the shell: a new one.
            _ipybox_drop_template(t, keep_app=True)
            return init_kernel()
        init_kernel()
        k = app.kernel
        if k.shell is not shell:
            raise RuntimeError("the kernel did not take the shell template")
        shell.parent = k
        shell.kernel = k
        # The app's configuration is the template's, with this connection
        # file (no config file was found): set in place, since assigning
        # it would reload every part's traits (about 10 ms of CPU) to the
        # values they hold.
        shell.config.IPKernelApp.connection_file = app.connection_file
        # Without the observers of a change: a cold shell's ipython_dir is
        # set before its extension manager exists, which would otherwise
        # make an extensions folder that a cold kernel does not have.
        shell._trait_values["ipython_dir"] = get_ipython_dir()
        shell.profile_dir = app.profile_dir
        shell.history_manager.hist_file = shell.history_manager._get_hist_file_name()
        shell.db = type(shell.db)(os.path.join(app.profile_dir.location, "db"))  # %store's, which makes the folder
        shell.starting_dir = os.getcwd()
        shell.home_dir = get_home_dir()
        shell.logger.home_dir = shell.home_dir
        shell.history_manager.dir_hist[:] = [pathlib.Path.cwd()]
        shell.init_environment()
        shell.init_virtualenv()
    app.init_kernel = init_kernel_with_template
    app.initialize()
    app.start()

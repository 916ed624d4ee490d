# ipybox kernel init. Runs once after every kernel (re)start, silently, in a
# private namespace: nothing defined here lands in the user's namespace.
# ipybox calls setup(config) with a dict built by the Go side.


def setup(config):
    import os
    import sys

    ip = get_ipython()  # noqa: F821 (provided by the caller's namespace)

    # Colours off: agents read plain text.
    try:
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

        ip.events.register("post_run_cell", _ipybox_restore_cwd)

    for p in reversed(config.get("sys_path") or []):
        if p not in sys.path:
            sys.path.insert(0, p)

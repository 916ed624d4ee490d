def _ipybox_lifeline():
    import os, sys, threading
    v = os.environ.pop("IPYBOX_LIFELINE", "")
    if not v:
        return
    if sys.platform == "win32":
        import msvcrt
        fd = msvcrt.open_osfhandle(int(v), os.O_RDONLY)
    else:
        fd = int(v)
        os.set_inheritable(fd, False)
    def watch():
        while True:
            try:
                if not os.read(fd, 64):
                    break
            except InterruptedError:
                continue
            except OSError:
                break
        if sys.platform != "win32":
            import signal
            try:
                if os.getpgid(0) == os.getpid():
                    os.killpg(0, signal.SIGKILL)
            except OSError:
                pass
        os._exit(1)
    threading.Thread(target=watch, name="ipybox-lifeline", daemon=True).start()
_ipybox_lifeline()
del _ipybox_lifeline

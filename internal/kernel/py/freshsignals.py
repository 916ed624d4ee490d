# The signal dispositions of a fresh interpreter started with none
# ignored (SIGPIPE and SIGXFSZ ignored, SIGINT raising KeyboardInterrupt,
# the others the default), as a cold-started sandboxed kernel has them. A
# forked child sets them all (_ipybox_fresh_signals): a kernel whose write
# to a closed pipe or socket got SIGPIPE's default would die of it (a peer
# that closes a connection would end the session), where a cold-started
# one raises BrokenPipeError; and one that inherited the fork server's
# ignored signals (ipybox run under nohup ignores SIGHUP) would differ
# from a cold one.
def _ipybox_fresh_signals():
    import signal
    ignored = {signal.SIGPIPE, signal.SIGXFSZ}
    for s in range(1, signal.NSIG):
        if s == signal.SIGINT:
            h = signal.default_int_handler
        elif s in ignored:
            h = signal.SIG_IGN
        else:
            h = signal.SIG_DFL
        try:
            signal.signal(s, h)
        except (ValueError, OSError):
            pass  # SIGKILL, SIGSTOP, and numbers that are no signal

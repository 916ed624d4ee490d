# The signal dispositions of a fresh interpreter (SIGPIPE and SIGXFSZ
# ignored, SIGINT raising KeyboardInterrupt, the others the default),
# recorded before the fork server changes any. A forked child restores
# them all (_ipybox_fresh_signals): a kernel whose write to a closed pipe
# or socket got SIGPIPE's default would die of it (a peer that closes a
# connection would end the session), where a cold-started one raises
# BrokenPipeError.
import signal as _ipybox_signal
_ipybox_signals = {}
for _s in range(1, _ipybox_signal.NSIG):
    try:
        _h = _ipybox_signal.getsignal(_s)
    except (ValueError, OSError):
        continue
    if _h is not None:
        _ipybox_signals[_s] = _h
def _ipybox_fresh_signals():
    import signal
    for s, h in _ipybox_signals.items():
        try:
            signal.signal(s, h)
        except (ValueError, OSError):
            pass  # SIGKILL, SIGSTOP

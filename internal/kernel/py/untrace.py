# Kernel code may make the fork server its tracer (PTRACE_TRACEME: the
# fork server is a kernel's parent), and its stops then reach the fork
# server's waitpid as statuses. A stop is no exit: reported as one, it
# ended the kernel's sandbox, and its real exit later stayed behind as a
# stale report for a kernel that would get the same pid.
# _ipybox_stopped says whether status is a stop, and detaches the child,
# handing it back the signal it stopped on.
def _ipybox_stopped(pid, status):
    import os, ctypes
    if not os.WIFSTOPPED(status):
        return False
    libc = ctypes.CDLL(None, use_errno=True)
    libc.ptrace(ctypes.c_long(17), ctypes.c_long(pid), None, ctypes.c_long(os.WSTOPSIG(status)))  # PTRACE_DETACH
    return True

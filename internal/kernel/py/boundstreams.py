# Keeps each stream message the kernel sends to a few megabytes.
# ipykernel buffers stdout and stderr and flushes them from its IO thread
# 0.2 s after the first write. A cell printing in a loop fills tens of
# megabytes in that time; the flush of a big buffer is slow, so the next
# one is bigger still, and hundreds of megabytes would leave as a few
# messages that the host must hold whole while it reads and decodes them.
# Each write already calls _schedule_flush, which returns at once while a
# flush is pending; there, a buffer past 1 MiB asks the IO thread to flush
# now, and one past 8 MiB waits for the flush, which holds a writer back
# to the pace the IO thread can send. A single write longer than that (one
# print of a 100 MB string) leaves in messages of at most 2 Mi characters,
# under the host's message limit (jupyter.MaxMessage). A wrapper around
# write itself cost a fifth of the throughput of a cell printing in a
# loop; this costs one tell() per write.
# ipykernel 6 has one buffer (_buffer); ipykernel 7 has one per parent
# message (_buffers, under _buffer_lock), since subshells run cells
# concurrently.
def _ipybox_bound_streams():
    from ipykernel.iostream import OutStream
    def _pending(self):
        bufs = getattr(self, "_buffers", None)
        if bufs is None:
            return self._buffer.tell()
        with self._buffer_lock:
            return sum(b.tell() for b in self._buffers.values())
    soft, hard = 1 << 20, 8 << 20
    orig = OutStream._schedule_flush
    def _schedule_flush(self):
        if not self._flush_pending:
            return orig(self)
        try:
            size = _pending(self)
        except ValueError:
            return  # the IO thread swapped and closed it: just flushed
        if size < soft:
            return
        if size >= hard:
            self.flush()
        elif not self._ipybox_hurry:
            self._ipybox_hurry = True
            self.pub_thread.schedule(self._ipybox_flush_now)
    def _ipybox_flush_now(self):
        self._ipybox_hurry = False
        self._flush()
    OutStream._schedule_flush = _schedule_flush
    OutStream._ipybox_flush_now = _ipybox_flush_now
    OutStream._ipybox_hurry = False
    # IOPub is a PUB socket: past its high-water mark (1000 messages by
    # default) it drops what it cannot send, silently. The host reads
    # within its budgets, and a slow reader (a slow OnEvent, a loaded
    # machine) let a cell of 4000 flushed lines arrive with 2493. With no
    # mark, what the host has not yet read waits in the kernel's memory,
    # which the kernel's own limits bound. The mark is set before the
    # bind: a connection takes the options its listener was bound with.
    import zmq
    from ipykernel.kernelapp import IPKernelApp
    orig_bind = IPKernelApp._bind_socket
    def _bind_socket(self, s, port):
        if s.socket_type in (zmq.PUB, zmq.XPUB):
            s.setsockopt(zmq.SNDHWM, 0)
        return orig_bind(self, s, port)
    IPKernelApp._bind_socket = _bind_socket
    chunk = 2 << 20  # characters: at most 8 MiB of UTF-8
    if hasattr(OutStream, "_flush_buffers"):
        # ipykernel 7 keeps a buffer per parent (subshells) and flushes
        # them through a generator of (parent, text): split each text.
        orig_buffers = OutStream._flush_buffers
        def _flush_buffers(self):
            for parent, data in orig_buffers(self):
                for off in range(0, max(len(data), 1), chunk):
                    yield parent, data[off:off + chunk]
        OutStream._flush_buffers = _flush_buffers
        _ipybox_quick_flush(OutStream, _pending)
        return
    if not hasattr(OutStream, "_flush_buffer"):
        return
    orig_buffer, orig_flush = OutStream._flush_buffer, OutStream._flush
    # The buffer's text and how far it was sent: an offset, because
    # slicing off the rest after each chunk copies it again and again (a
    # 200 MB write took a minute and more, past ipykernel's flush timeout:
    # its status: idle then overtook its output).
    def _flush_buffer(self):
        data, off = self._ipybox_rest, self._ipybox_off
        if off >= len(data):
            data, off = orig_buffer(self), 0
        self._ipybox_rest, self._ipybox_off = data, off + chunk
        return data[off:off + chunk]
    def _flush(self):
        orig_flush(self)
        while self._ipybox_off < len(self._ipybox_rest):
            orig_flush(self)
        self._ipybox_rest, self._ipybox_off = "", 0
    OutStream._flush_buffer = _flush_buffer
    OutStream._flush = _flush
    OutStream._ipybox_rest = ""
    OutStream._ipybox_off = 0
    # ipykernel 6's write, for the common case (a str, no echo, in the
    # kernel's own process), with the bound above inlined: one call per
    # write instead of three, and no getpid() system call per write (the
    # pid is refreshed at each os.fork, so a multiprocessing child still
    # takes ipykernel's own write). A cell writing 100 MB in 100-byte
    # lines ran its loop in 0.76 s instead of 1.05.
    import os
    pid = [os.getpid()]
    os.register_at_fork(after_in_child=lambda: pid.__setitem__(0, os.getpid()))
    orig_write = OutStream.write
    def write(self, string):
        if string.__class__ is not str or self.echo is not None or self.pub_thread is None or pid[0] != self._master_pid:
            return orig_write(self, string)
        with self._buffer_lock:
            buf = self._buffer
            buf.write(string)
            size = buf.tell()
        if size >= soft or not self._flush_pending:
            _schedule_flush(self)
        return len(string)
    OutStream.write = write
    _ipybox_quick_flush(OutStream, _pending)
# ipybox reads a cell's output until the kernel's status: idle on IOPub,
# which the IO thread sends after every message scheduled before it. So a
# flush with nothing buffered and no flush under way need not wait for the
# IO thread (ipykernel flushes both streams before and after each request:
# four round trips to that thread, about 0.6 ms of a `pass` cell). A flush
# under way has taken the text out of the buffer but may not have
# scheduled all of its messages yet: _flush counts itself in before it
# takes the text, and a flush reads the buffer before the count, so that
# it never sees both empty while text is on its way. The 0.5 ms sleep
# before each execute_reply, which ipykernel marks as a workaround for
# clients that stop at the reply, buys ipybox nothing either. A flush with
# text buffered, under way or echoed waits as before.
# A Python child that the kernel forked (os.fork, multiprocessing) sends
# its output to the kernel over a pipe, which the IO thread reads: only
# the wait of a flush gives it time to, so once the kernel has called
# os.fork, every flush waits as ipykernel's does. IPython's `!cmd` forks
# through os.forkpty and execs: it does not count.
def _ipybox_quick_flush(OutStream, pending):
    import os
    forked = [False]
    fork = os.fork
    def _fork():
        pid = fork()
        forked[0] = pid != 0
        return pid
    _fork.__doc__, _fork.__name__ = fork.__doc__, fork.__name__
    os.fork = _fork
    orig_flush, orig_inner = OutStream.flush, OutStream._flush
    def _flush(self):
        self._ipybox_flushing += 1
        try:
            orig_inner(self)
        finally:
            self._ipybox_flushing -= 1
    def flush(self):
        if self.echo is None:
            try:
                if pending(self) == 0 and self._ipybox_flushing == 0 and not forked[0]:
                    return
            except ValueError:
                pass
        return orig_flush(self)
    OutStream._flush = _flush
    OutStream.flush = flush
    OutStream._ipybox_flushing = 0
    try:
        from ipykernel.kernelbase import Kernel
        Kernel._execute_sleep.default_value = 0.0
        if Kernel.initialized():  # a remote kernel: it runs already
            Kernel.instance()._execute_sleep = 0.0
    except (ImportError, AttributeError):
        pass
_ipybox_bound_streams()
del _ipybox_bound_streams, _ipybox_quick_flush

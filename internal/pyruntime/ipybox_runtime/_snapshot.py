"""Snapshots of a kernel's namespace: what hibernation saves and restores.

The host calls :func:`save` and :func:`load` with silent cells, in the
session's own kernel, inside its sandbox or container; the host itself
never reads what is in a snapshot (it copies, moves and deletes the file,
and reads its size). Each reports what it did as a display of REPORT_MIME.

What is saved: the names the user's code bound in the namespace. A module
is saved as its name (``np`` is ``numpy``) and imported again at restore.
Every other value is pickled with dill (functions and classes defined in
cells by value, those of modules by reference), one record per name,
through one pickler, so that two names bound to one object are one object
again after the restore. What cannot be saved (an open file, a socket, a
thread, a generator, a handle to a running process, anything the pickler
refuses) is listed by name with the reason, and so is what would take the
snapshot past its size limit.

The file::

    MAGIC, then each record's pickle, then the manifest (JSON), then
    TRAILER: the manifest's offset and length (8 bytes each, little endian)
    and END.

It is written beside its name and renamed when whole: a save that fails or
is cut short leaves the previous snapshot as it was.

Nothing here is for user code.
"""

import io
import json
import os
import re
import struct
import sys
import time
import types

REPORT_MIME = "application/x-ipybox-snapshot+json"
FILE = "namespace.ipybox-snapshot"
MAGIC = b"IPYBOX-SNAPSHOT 1\n"
END = b"\nIPYBOX-END\n"
TRAILER = struct.Struct("<QQ")
FORMAT = 1

# The manifest is read before anything is unpickled: bound what it may
# claim.
MAX_MANIFEST = 64 << 20
MAX_REASON = 300
# How many names a report lists; the rest are counted.
MAX_LISTED = 2000

# IPython's own names in the namespace: the output cache and history
# (_, __, _5, _i5, In, Out...), and what the shell puts there.
_OWN = re.compile(r"^(_+|_i+|_i\d+|_\d+|_oh|_ih|_dh|In|Out|exit|quit|get_ipython|_exit_code|__builtins?__|__name__|__doc__|__package__|__loader__|__spec__)$")


class SnapshotError(Exception):
    """The snapshot cannot be read: the message says why."""


class _OverBudget(Exception):
    pass


def _publish(report):
    from IPython.display import publish_display_data

    publish_display_data({REPORT_MIME: report})


def _shell():
    from IPython import get_ipython

    return get_ipython()


def _reason(e):
    s = "%s: %s" % (type(e).__name__, e)
    s = " ".join(s.split())
    return s[:MAX_REASON]


# ------------------------------------------------------------------ what


def _unsaveable_types():
    """(types, reason) pairs of values that no snapshot can hold: what they
    stand for lives outside the process, or is a point in a running
    computation."""
    import socket
    import subprocess
    import threading

    out = [
        ((io.IOBase,), "an open file or stream: open it again after the restore"),
        ((socket.socket,), "a socket: connect again after the restore"),
        ((threading.Thread,), "a thread: start it again after the restore"),
        ((types.GeneratorType, types.AsyncGeneratorType), "a generator: its place in the iteration cannot be saved; make it again"),
        ((types.CoroutineType,), "a coroutine: its place in the computation cannot be saved"),
        ((subprocess.Popen,), "a handle to a running process, which ends with the kernel"),
        ((types.FrameType, types.TracebackType), "a frame of a running computation"),
    ]
    # Not io.BytesIO and io.StringIO: they are data, and pickle well.
    opt = [
        ("multiprocessing.pool", "Pool", "a pool of worker processes, which end with the kernel"),
        ("concurrent.futures", "Executor", "a pool of workers, which end with the kernel"),
        ("concurrent.futures", "Future", "a pending result of a computation in flight"),
        ("asyncio", "AbstractEventLoop", "an event loop"),
        ("asyncio", "Future", "a task or future of the event loop"),
        ("sqlite3", "Connection", "a database connection: connect again after the restore"),
        ("sqlite3", "Cursor", "a database cursor: connect again after the restore"),
        ("mmap", "mmap", "a memory map of a file: map it again after the restore"),
    ]
    for mod, name, why in opt:
        m = sys.modules.get(mod)
        t = getattr(m, name, None) if m is not None else None
        if isinstance(t, type):
            out.append(((t,), why))
    return out


def _why_not(v, kinds):
    if isinstance(v, (io.BytesIO, io.StringIO)):
        return None
    for ts, why in kinds:
        if isinstance(v, ts):
            return why
    return None


def _names(ip):
    """The names to save, in the namespace's order."""
    ns = ip.user_ns
    hidden = getattr(ip, "user_ns_hidden", {})
    out = []
    for name in list(ns):
        if not isinstance(name, str) or _OWN.match(name) or name.startswith("__ipybox"):
            continue
        if name in hidden and hidden[name] is ns[name]:
            continue
        out.append(name)
    return out


def _workspace_modules(ip):
    """Modules imported from the workspace or the tool server (mcptools):
    the import hooks let only the user's own code import them, so they are
    imported, as the user's code, before the records that may refer to
    them are read."""
    dirs = []
    for f in sys.meta_path:
        real = getattr(f, "real", None)
        if isinstance(real, list) and getattr(f, "user_ns", None) is ip.user_ns:
            dirs.extend(real)
    out = []
    for name, m in list(sys.modules.items()):
        if m is None or name.startswith("ipybox_runtime"):
            continue
        if name == "mcptools" or name.startswith("mcptools."):
            out.append(name)
            continue
        f = getattr(m, "__file__", None)
        if not (isinstance(f, str) and dirs):
            continue
        # A checkpoint after every cell asks again for the same thousand
        # modules: resolve each file once.
        key = (f, tuple(dirs))
        hit = _in_workspace.get(key)
        if hit is None:
            real = os.path.realpath(f)
            hit = any(real == d or real.startswith(d.rstrip(os.sep) + os.sep) for d in dirs)
            _in_workspace[key] = hit
        if hit:
            out.append(name)
    return sorted(out, key=lambda n: n.count("."))


# Whether a module's file is below the workspace, by (file, workspace dirs).
_in_workspace = {}


# ------------------------------------------------------------------ save


class _Limited:
    """A file that refuses to grow past a size."""

    def __init__(self, f, limit):
        self.f = f
        self.limit = limit
        self.pos = 0

    def write(self, b):
        n = len(b) if not isinstance(b, memoryview) else b.nbytes
        if self.limit >= 0 and self.pos + n > self.limit:
            raise _OverBudget()
        self.f.write(b)
        self.pos += n
        return n

    def rewind(self, pos):
        self.f.flush()
        self.f.seek(pos)
        self.f.truncate(pos)
        self.pos = pos


def _pickler_class(kinds):
    import dill

    class Pickler(dill.Pickler):
        # Values that must not travel inside another one either (a list
        # of open files): dill would save a file by name, and reopen it
        # for writing at the restore.
        def reducer_override(self, obj):
            why = _why_not(obj, kinds)
            if why is not None:
                import pickle

                raise pickle.PicklingError("it holds %s (%s)" % (why.split(":")[0], type(obj).__name__))
            return NotImplemented

    return Pickler


def save(directory, max_bytes=-1):
    """Saves the user's namespace to FILE in directory, at most max_bytes
    of it (negative: no limit), and publishes what was saved and what not."""
    t0 = time.monotonic()
    ip = _shell()
    ns = ip.user_ns
    kinds = _unsaveable_types()
    imports, unsaved, values = [], [], []
    for name in _names(ip):
        v = ns[name]
        if isinstance(v, types.ModuleType):
            modname = getattr(v, "__name__", None)
            if isinstance(modname, str) and sys.modules.get(modname) is v:
                imports.append([name, modname])
            else:
                unsaved.append([name, "a module that cannot be imported again by its name"])
            continue
        why = _why_not(v, kinds)
        if why is not None:
            unsaved.append([name, why])
            continue
        values.append((name, v))

    path = os.path.join(directory, FILE)
    part = path + ".part"
    fd = os.open(part, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0), 0o600)
    records = []
    try:
        with os.fdopen(fd, "wb", buffering=1 << 20) as f:
            w = _Limited(f, max_bytes)
            try:
                w.write(MAGIC)
            except _OverBudget:
                raise SnapshotError("the snapshot's size limit (%d bytes) leaves no room" % max_bytes) from None
            p = _pickler_class(kinds)(w, protocol=5)
            p._main = ip.user_module
            reserve = 256 * (len(values) + len(imports) + len(unsaved)) + 4096
            for name, v in values:
                start = w.pos
                before = len(p.memo)
                try:
                    # Room for the manifest, which comes last.
                    w.limit = -1 if max_bytes < 0 else max(0, max_bytes - reserve)
                    p.dump(v)
                except BaseException as e:
                    if isinstance(e, (KeyboardInterrupt, SystemExit)):
                        raise
                    # Forget what this record put in the memo: the next
                    # ones must not refer to bytes that are cut off.
                    for k, (i, _) in list(p.memo.items()):
                        if i >= before:
                            del p.memo[k]
                    p._postproc = type(p._postproc)()
                    w.rewind(start)
                    if isinstance(e, _OverBudget):
                        unsaved.append([name, "over the snapshot's size limit of %d bytes" % max_bytes])
                    else:
                        unsaved.append([name, "cannot be saved: " + _reason(e)])
                    continue
                records.append({"name": name, "offset": start, "length": w.pos - start, "memo": [before, len(p.memo)]})
            manifest = {
                "format": FORMAT,
                "saved_at": time.time(),
                "python": sys.version.split()[0],
                "dill": getattr(sys.modules.get("dill"), "__version__", ""),
                "imports": imports,
                "preimport": _workspace_modules(ip),
                "records": records,
                "unsaved": unsaved,
            }
            blob = json.dumps(manifest).encode("utf-8")
            off = w.pos
            w.limit = -1
            w.write(blob)
            w.write(TRAILER.pack(off, len(blob)))
            w.write(END)
            size = w.pos
            if max_bytes >= 0 and size > max_bytes:
                raise SnapshotError(
                    "the snapshot takes %d bytes even without its values, over its size limit of %d bytes (too many names?)" % (size, max_bytes)
                )
            f.flush()
        os.replace(part, path)
    except BaseException:
        try:
            os.unlink(part)
        except OSError:
            pass
        raise
    _publish(
        {
            "op": "save",
            "saved": [r["name"] for r in records][:MAX_LISTED],
            "saved_count": len(records),
            "imports": imports[:MAX_LISTED],
            "unsaved": unsaved[:MAX_LISTED],
            "unsaved_count": len(unsaved),
            "bytes": size,
            "seconds": round(time.monotonic() - t0, 4),
        }
    )


# ------------------------------------------------------------------ load


class _Window:
    """A read-only view of bytes [start, end) of a file, for one record."""

    def __init__(self, f):
        self.f = f
        self.left = 0

    def at(self, start, length):
        self.f.seek(start)
        self.left = length

    def read(self, n=-1):
        if n is None or n < 0 or n > self.left:
            n = self.left
        b = self.f.read(n)
        self.left -= len(b)
        return b

    def readinto(self, b):
        m = memoryview(b).cast("B")
        n = min(len(m), self.left)
        got = self.f.readinto(m[:n]) if n else 0
        self.left -= got
        return got

    def readline(self):
        b = self.f.readline(self.left)
        self.left -= len(b)
        return b


def _manifest(f, size):
    if size < len(MAGIC) + TRAILER.size + len(END):
        raise SnapshotError("the snapshot is truncated (%d bytes)" % size)
    f.seek(0)
    if f.read(len(MAGIC)) != MAGIC:
        raise SnapshotError("the file is not an ipybox snapshot (its first bytes are not the format's)")
    f.seek(size - TRAILER.size - len(END))
    tail = f.read(TRAILER.size + len(END))
    if tail[TRAILER.size:] != END:
        raise SnapshotError("the snapshot is truncated: its end marker is missing (a save that was cut short?)")
    off, n = TRAILER.unpack(tail[: TRAILER.size])
    if n > MAX_MANIFEST or off < len(MAGIC) or off + n != size - TRAILER.size - len(END):
        raise SnapshotError("the snapshot's table of contents is out of bounds")
    f.seek(off)
    try:
        m = json.loads(f.read(n).decode("utf-8"))
    except ValueError as e:
        raise SnapshotError("the snapshot's table of contents is not valid: %s" % _reason(e)) from None
    if not isinstance(m, dict) or m.get("format") != FORMAT:
        raise SnapshotError("the snapshot's format is not one this ipybox reads")

    def pairs(v):
        return isinstance(v, list) and all(isinstance(p, list) and len(p) == 2 and all(isinstance(s, str) for s in p) for p in v)

    recs = m.get("records")
    if not (pairs(m.get("imports")) and pairs(m.get("unsaved")) and isinstance(recs, list)):
        raise SnapshotError("the snapshot's table of contents is not valid")
    pre = m.get("preimport", [])
    if not (isinstance(pre, list) and all(isinstance(s, str) for s in pre)):
        raise SnapshotError("the snapshot's table of contents is not valid")
    last = len(MAGIC)
    memo = 0
    for r in recs:
        ok = (
            isinstance(r, dict)
            and isinstance(r.get("name"), str)
            and all(isinstance(r.get(k), int) and not isinstance(r.get(k), bool) for k in ("offset", "length"))
            and isinstance(r.get("memo"), list)
            and len(r["memo"]) == 2
            and all(isinstance(i, int) and not isinstance(i, bool) for i in r["memo"])
        )
        if not ok or r["offset"] != last or r["length"] <= 0 or r["offset"] + r["length"] > off or r["memo"][0] != memo or r["memo"][1] < memo:
            raise SnapshotError("the snapshot's table of contents is not valid (record %r)" % (r.get("name") if isinstance(r, dict) else r,))
        last = r["offset"] + r["length"]
        memo = r["memo"][1]
    return m


def _as_user(ip, fn, *args):
    """Calls fn with a frame whose globals are the user's namespace above
    it: the workspace's import hook lets only the user's code import from
    the workspace."""
    code = compile("lambda f, a: f(*a)", "<ipybox restore>", "eval")
    return eval(code, ip.user_ns)(fn, args)


class _Missing:
    def __repr__(self):
        return "<not restored>"


def _gets(data):
    """The memo indices a record's pickle reads."""
    import pickletools

    out = set()
    for op, arg, _ in pickletools.genops(data):
        if op.name in ("GET", "BINGET", "LONG_BINGET"):
            out.add(int(arg))
    return out


def load(directory):
    """Restores the namespace saved in directory into this kernel, and
    publishes what came back and what did not."""
    import importlib

    t0 = time.monotonic()
    ip = _shell()
    ns = ip.user_ns
    path = os.path.join(directory, FILE)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        _publish({"op": "load", "absent": True})
        return
    except OSError as e:
        raise SnapshotError("the snapshot cannot be opened: %s" % _reason(e)) from None
    with os.fdopen(fd, "rb", buffering=1 << 20) as f:
        import stat

        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise SnapshotError("the snapshot is not a regular file")
        m = _manifest(f, st.st_size)
        missing = [[n, why] for n, why in m["unsaved"]]
        imported = []
        for name, modname in m["imports"]:
            try:
                ns[name] = _as_user(ip, importlib.import_module, modname)
                imported.append([name, modname])
            except BaseException as e:
                if isinstance(e, (KeyboardInterrupt, SystemExit)):
                    raise
                missing.append([name, "import %s failed: %s" % (modname, _reason(e))])
        for modname in m.get("preimport", []):
            try:
                _as_user(ip, importlib.import_module, modname)
            except Exception:
                pass  # a record that needs it says so
        import dill

        def unpickler():
            u = dill.Unpickler(win)
            u._main = ip.user_module
            return u

        win = _Window(f)
        u = unpickler()
        bad = []  # (name, memo range) of records that failed
        restored = []
        for r in m["records"]:
            name, (lo, hi) = r["name"], r["memo"]
            dep = None
            if bad:
                win.at(r["offset"], r["length"])
                try:
                    gets = _gets(win.read())
                except Exception as e:
                    gets = None
                    dep = "cannot be read: " + _reason(e)
                for bname, (blo, bhi) in bad:
                    if gets is not None and any(blo <= g < bhi for g in gets):
                        dep = "it refers to %s, which was not restored" % bname
                        break
            if dep is None:
                win.at(r["offset"], r["length"])
                try:
                    v = u.load()
                    if win.left != 0:
                        raise SnapshotError("the record does not end where the table of contents says")
                    ns[name] = v
                    restored.append(name)
                    continue
                except BaseException as e:
                    if isinstance(e, (KeyboardInterrupt, SystemExit)):
                        raise
                    dep = "cannot be restored: " + _reason(e)
            missing.append([name, dep])
            bad.append((name, (lo, hi)))
            # Keep the memo's numbering: what this record would have put
            # there is marked missing, and records that read it are skipped.
            memo = dict(u.memo.copy())
            for i in range(lo, hi):
                memo.setdefault(i, _Missing())
            u = unpickler()
            u.memo = memo
    _publish(
        {
            "op": "load",
            "restored": restored[:MAX_LISTED],
            "restored_count": len(restored),
            "imports": imported[:MAX_LISTED],
            "missing": missing[:MAX_LISTED],
            "missing_count": len(missing),
            "saved_at": m.get("saved_at") if isinstance(m.get("saved_at"), (int, float)) else 0,
            "seconds": round(time.monotonic() - t0, 4),
        }
    )

"""What a kernel that does not share the host's disk (a gateway kernel) needs.

- :class:`ToolModuleFinder` imports the generated ``mcptools`` modules from
  the host's tool server instead of a folder: the host's workspace holds
  them, and every import asks for the current source.
- :func:`recv` and :func:`get` move a file between the host and the kernel's
  working directory over the kernel's own channel (upload_file and
  download_file).
- :func:`pip_install` installs a package for this kernel's interpreter.

Nothing here is for user code; the host calls it with silent cells.
"""

import base64
import glob
import importlib.abc
import importlib.util
import os
import stat
import subprocess
import sys

# The directory relative paths start from: the kernel's working directory at
# start (kernel code may chdir later; the host's paths stay the same).
_root = None

# Where pip_install installs, below _root, and the site directories under it
# that are on sys.path.
PREFIX = os.path.join(".ipybox", "prefix")

# The MIME type of a download chunk's display.
CHUNK_MIME = "application/x-ipybox-chunk+json"


def setup(root=None):
    global _root
    _root = root or os.getcwd()
    add_site_dirs()
    if not any(isinstance(f, ToolModuleFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, ToolModuleFinder())


def _path(rel, root=None):
    return os.path.join(root or _root or os.getcwd(), rel)


# ---------------------------------------------------------------- modules


class ToolModuleFinder(importlib.abc.MetaPathFinder):
    """Finds mcptools and its submodules on the host's tool server."""

    PACKAGE = "mcptools"

    def find_spec(self, fullname, path=None, target=None):
        if fullname != self.PACKAGE and not fullname.startswith(self.PACKAGE + "."):
            return None
        from . import ToolServerError, _post

        try:
            doc = _post("/v1/modules/get", {"name": fullname})
        except ToolServerError as e:
            if e.status == 404:
                return None  # no such module: ModuleNotFoundError
            raise ImportError("cannot import %s from the ipybox tool server: %s" % (fullname, e), name=fullname) from None
        source = doc.get("source")
        if not isinstance(source, str):
            raise ImportError("the ipybox tool server sent no source for %s" % fullname, name=fullname)
        loader = _SourceLoader(fullname, source)
        spec = importlib.util.spec_from_loader(fullname, loader, origin="ipybox-tool-server", is_package=bool(doc.get("package")))
        return spec

    def invalidate_caches(self):
        pass


class _SourceLoader(importlib.abc.Loader):
    def __init__(self, fullname, source):
        self.fullname = fullname
        self.source = source

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        name = self.fullname.replace(".", "/") + ("/__init__.py" if module.__spec__.submodule_search_locations is not None else ".py")
        code = compile(self.source, "<ipybox tool server>/" + name, "exec", dont_inherit=True)
        exec(code, module.__dict__)

    def get_source(self, fullname):
        return self.source


# ---------------------------------------------------------------- files


def recv(rel, root=None):
    """Writes what the host sends through input() (base64 lines, then an
    empty one) to rel. The file is written beside its name and renamed when
    whole, so that a transfer that fails leaves the old file as it was.
    input() and not the cell's code carries the data: ipykernel hashes a
    cell's code in pure Python (for its debugger), which costs seconds per
    megabyte."""
    dst = _path(rel, root)
    parent = os.path.dirname(dst)
    if parent:
        os.makedirs(parent, exist_ok=True)
    if os.path.isdir(dst):
        raise IsADirectoryError("%s is a directory; give the file's path, including its name" % rel)
    part = dst + ".ipybox-part"
    try:
        with open(part, "wb") as f:
            while True:
                s = input()
                if not s:
                    break
                if s == "-":
                    raise OSError("the host could not read the file it was sending")
                f.write(base64.b64decode(s, validate=True))
        os.replace(part, dst)
    except BaseException:
        try:
            os.unlink(part)
        except OSError:
            pass
        raise


def get(rel, offset, n, root=None):
    """Publishes n bytes of rel from offset, with the file's size, as a
    display of CHUNK_MIME (displays are routed to the cell that asked, unlike
    stdout, which a background thread may write to at the same time)."""
    from IPython.display import publish_display_data

    with open(_path(rel, root), "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise OSError("%s is not a regular file" % rel)
        f.seek(offset)
        b = f.read(n)
    publish_display_data({CHUNK_MIME: {"size": st.st_size, "data": base64.b64encode(b).decode("ascii")}})


# ---------------------------------------------------------------- packages


def add_site_dirs():
    """Puts the site directories of PREFIX on sys.path (pip's layout below a
    prefix differs between Pythons and distributions: look for all)."""
    import site

    base = _path(PREFIX)
    for pattern in ("lib/python*/site-packages", "lib/python*/dist-packages", "local/lib/python*/dist-packages"):
        for d in sorted(glob.glob(os.path.join(base, pattern))):
            if d not in sys.path:
                site.addsitedir(d)
                sys.path.remove(d)
                sys.path.insert(0, d)


def pip_install(requirement, timeout):
    """Runs pip for this interpreter, installing into PREFIX below the
    working directory (it persists across restarts, as the files do), and
    prints pip's output."""
    cmd = [sys.executable, "-m", "pip", "install", "--prefix", _path(PREFIX), "--no-input", "--disable-pip-version-check", requirement]
    p = subprocess.run(cmd, cwd=_root, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=timeout)
    out = p.stdout.decode("utf-8", "replace")
    if p.returncode != 0:
        raise RuntimeError("pip install %s failed (exit status %d):\n%s" % (requirement, p.returncode, out))
    add_site_dirs()
    importlib.invalidate_caches()
    sys.stdout.write(out)

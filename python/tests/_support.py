"""What the tests need: the built ipybox binary (IPYBOX_BIN), the npm
server-everything (IPYBOX_TEST_EVERYTHING, or tools/npm as scripts/setup.sh
installs it), and a workspace shared by the tests of one run, so that its
virtualenv is made once.

python/python_test.go builds the binary and runs this suite with every
Python >= 3.10 it finds. Run alone, a missing part skips the tests, unless
CI=true, where it fails them, as internal/testenv does for Go tests.
"""

from __future__ import annotations

import asyncio
import atexit
import os
import shutil
import tempfile
import unittest
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _missing(what: str) -> None:
    if os.environ.get("CI") == "true":
        raise RuntimeError(f"required in CI: {what}")
    raise unittest.SkipTest(f"skipped (missing): {what}")


def binary() -> str:
    b = os.environ.get("IPYBOX_BIN")
    if not b or not os.access(b, os.X_OK):
        _missing("IPYBOX_BIN, the built ipybox binary (go test ./python builds it and sets it)")
    return b  # type: ignore[return-value]


def everything() -> dict:
    p = os.environ.get("IPYBOX_TEST_EVERYTHING") or str(REPO / "tools" / "npm" / "node_modules" / ".bin" / "mcp-server-everything")
    if not os.access(p, os.X_OK) or shutil.which("node") is None:
        _missing(f"{p} and node; run scripts/setup.sh")
    return {"command": p, "args": ["stdio"]}


_shared: list[Path] = []


def shared_workspace() -> Path:
    if not _shared:
        d = Path(tempfile.mkdtemp(prefix="ipybox-pytest-")).resolve()
        atexit.register(shutil.rmtree, d, True)
        _shared.append(d)
    return _shared[0]


def new_workspace() -> Path:
    d = Path(tempfile.mkdtemp(prefix="ipybox-pytest-")).resolve()
    atexit.register(shutil.rmtree, d, True)
    return d


def alive(pid: int) -> bool:
    """Whether pid is a live process (a zombie counts as dead)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def processes_in(directory: Path) -> list[int]:
    """The live processes that work in directory (kernels) or run a
    program from it (the fork server, from the workspace's virtualenv)."""
    out = []
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            cwd = os.readlink(f"/proc/{p}/cwd")
            with open(f"/proc/{p}/cmdline", "rb") as f:
                argv0 = f.read().split(b"\0", 1)[0].decode(errors="replace")
        except OSError:
            continue
        if (cwd == str(directory) or argv0.startswith(str(directory) + "/")) and alive(int(p)):
            out.append(int(p))
    return out


class LoopTestCase(unittest.TestCase):
    """Runs coroutines on one event loop for the whole class, so that the
    class can share an executor (IsolatedAsyncioTestCase has a loop per
    test). Every run is bounded."""

    loop: asyncio.AbstractEventLoop

    @classmethod
    def setUpClass(cls) -> None:
        cls.loop = asyncio.new_event_loop()

    @classmethod
    def tearDownClass(cls) -> None:
        cls.loop.run_until_complete(cls.loop.shutdown_asyncgens())
        cls.loop.close()

    @classmethod
    def run_async(cls, coro, timeout: float = 120):
        return cls.loop.run_until_complete(asyncio.wait_for(coro, timeout))

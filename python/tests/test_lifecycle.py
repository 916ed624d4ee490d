"""Starting and stopping, options, bad input, generate_mcp_sources and the
synchronous wrapper: each test has executors of its own."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
import unittest
from pathlib import Path
from unittest import mock

from ipybox import (
    ApprovalRequest,
    CodeExecutionError,
    CodeExecutionResult,
    CodeExecutor,
    SyncCodeExecutor,
    find_binary,
    generate_mcp_sources,
)

from ._support import LoopTestCase, alive, binary, everything, new_workspace, processes_in, shared_workspace

ECHO = "from mcptools.everything.echo import Params, run\nprint(run(Params(message={!r})))"


class LifecycleTest(LoopTestCase):
    def executor(self, **kw) -> CodeExecutor:
        kw.setdefault("binary", binary())
        kw.setdefault("working_dir", shared_workspace())
        kw.setdefault("kernel_init_timeout", 90)
        return CodeExecutor(**kw)

    def test_start_stop_reaps_everything(self):
        ws = new_workspace()

        async def run():
            ex = self.executor(working_dir=ws)
            async with ex:
                pid = ex._client.pid
                self.assertTrue(alive(pid))
                self.assertEqual((await ex.execute("print('up')")).text, "up")
                self.assertTrue(processes_in(ws), "no kernel runs in the workspace")
            return ex, pid

        ex, pid = self.run_async(run(), timeout=180)
        self.assertFalse(alive(pid), "ipybox mcp still runs after stop")
        deadline = time.monotonic() + 10
        while processes_in(ws) and time.monotonic() < deadline:
            time.sleep(0.05)
        self.assertEqual(processes_in(ws), [], "kernels outlived the executor")
        # Used after close: a clear error, at once.
        with self.assertRaisesRegex(RuntimeError, "closed"):
            self.run_async(ex.execute("1"), timeout=5)
        with self.assertRaisesRegex(RuntimeError, "closed"):
            self.run_async(ex.reset(), timeout=5)
        self.run_async(ex.stop(), timeout=5)  # idempotent
        with self.assertRaisesRegex(RuntimeError, "create a new one"):
            self.run_async(ex.start(), timeout=5)

    def test_mcp_server_that_cannot_start_fails_at_start(self):
        # Its error, naming the server, at start; not a cell that fails
        # later with "No module named 'mcptools'".
        ws = new_workspace()

        async def run():
            ex = self.executor(working_dir=ws, mcp_servers={"nope": {"command": "/nonexistent/ipybox-no-such-server"}})
            await ex.start()

        with self.assertRaisesRegex(RuntimeError, r"mcp_servers\['nope'\] could not be registered: .*/nonexistent/ipybox-no-such-server"):
            self.run_async(run(), timeout=180)
        deadline = time.monotonic() + 10
        while processes_in(ws) and time.monotonic() < deadline:
            time.sleep(0.05)
        self.assertEqual(processes_in(ws), [], "the failed start left processes behind")

    def test_not_started(self):
        with self.assertRaisesRegex(RuntimeError, "not started"):
            self.run_async(self.executor().execute("1"), timeout=5)

    def test_missing_binary(self):
        with self.assertRaisesRegex(FileNotFoundError, "'/nonexistent/ipybox' .*binary argument"):
            find_binary("/nonexistent/ipybox")
        real = binary()
        with mock.patch.dict(os.environ, {"IPYBOX_BIN": "/nonexistent/bin"}):
            with self.assertRaisesRegex(FileNotFoundError, "IPYBOX_BIN"):
                find_binary()
            self.assertEqual(find_binary(real), os.path.abspath(real))  # the argument wins
        with mock.patch.dict(os.environ, {"IPYBOX_BIN": "", "PATH": "/nonexistent"}):
            with self.assertRaisesRegex(FileNotFoundError, "IPYBOX_BIN.*PATH"):
                find_binary()
        with mock.patch.dict(os.environ, {"IPYBOX_BIN": binary()}):
            self.assertEqual(find_binary(), binary())
        ex = self.executor(binary="/nonexistent/ipybox")
        with self.assertRaises(FileNotFoundError):
            self.run_async(ex.start(), timeout=10)

    def test_bad_options(self):
        for kw, pattern in (
            ({"log_level": "LOUD"}, "log_level"),
            ({"kernel_env": {"BAD-KEY": "1"}}, "BAD-KEY"),
            ({"connect_timeout": 0}, "connect_timeout"),
            ({"approval_timeout": -1}, "approval_timeout"),
        ):
            with self.subTest(kw=kw), self.assertRaisesRegex(ValueError, pattern):
                self.executor(**kw)
        with self.assertRaisesRegex(FileNotFoundError, "working_dir"):
            self.run_async(self.executor(working_dir="/nonexistent/ws").start(), timeout=10)
        # A bad option that only ipybox mcp checks: its message reaches the
        # caller, naming the argument (not ipybox mcp's flag, nor the
        # private file that carries mcp_servers).
        for kw, pattern in (
            ({"sandbox_config": "/nonexistent/srt.json"}, r"refused an argument: sandbox_config: .*srt\.json"),
            ({"mcp_servers": {"x": {"comand": "y"}}}, r"refused an argument: mcp_servers: server \"x\": .*\"comand\""),
        ):
            with self.subTest(kw=kw):
                ex = self.executor(**kw)
                with self.assertRaisesRegex(RuntimeError, pattern) as cm:
                    self.run_async(ex.start(), timeout=30)
                self.assertNotIn("--", str(cm.exception))
                self.assertNotIn("ipybox-mcp-config-", str(cm.exception))

    def test_server_that_never_answers(self):
        ws = new_workspace()
        fake = ws / "silent-ipybox"
        fake.write_text("#!/bin/sh\nexec sleep 300\n")
        fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
        ex = CodeExecutor(binary=str(fake), working_dir=ws, connect_timeout=1)
        t0 = time.monotonic()
        with self.assertRaisesRegex(asyncio.TimeoutError, "connect_timeout"):
            self.run_async(ex.start(), timeout=60)
        self.assertLess(time.monotonic() - t0, 30)
        self.assertEqual([p for p in processes_in(ws)], [], "the fake server was not reaped")

    def test_server_killed_mid_cell(self):
        async def run():
            async with self.executor() as ex:
                pid = ex._client.pid
                task = asyncio.ensure_future(ex.execute("import time\ntime.sleep(60)"))
                await asyncio.sleep(1)
                os.kill(pid, signal.SIGKILL)
                with self.assertRaisesRegex(ConnectionError, "killed by signal 9"):
                    await asyncio.wait_for(task, 20)
                with self.assertRaises(ConnectionError):
                    await ex.execute("1")

        self.run_async(run(), timeout=120)

    def test_kernel_env_and_images_dir(self):
        ws = new_workspace()
        images = ws / "plots"
        value = 'quote " dollar $HOME back \\ new\nline'

        async def run():
            with mock.patch.dict(os.environ, {"IPYBOX_HOST_ONLY": "secret"}):
                async with self.executor(working_dir=ws, images_dir=images, kernel_env={"MY_VAR": value}) as ex:
                    r = await ex.execute("import os\nprint(repr(os.environ.get('MY_VAR')), os.environ.get('IPYBOX_HOST_ONLY'))")
                    p = await ex.execute("import matplotlib.pyplot as plt\nplt.plot([1, 2]); plt.show()")
            return r, p

        r, p = self.run_async(run(), timeout=180)
        self.assertEqual(r.text, f"{value!r} None")
        self.assertEqual([i.parent for i in p.images], [images])
        # The kernel-env file was removed once the server had read it.
        tmp = Path(tempfile.gettempdir())
        left = [f for f in tmp.glob("ipybox-kernel-env-*") if time.time() - f.stat().st_mtime < 120]
        self.assertEqual(left, [])

    def test_no_tool_approval(self):
        async def run():
            async with self.executor(approve_tool_calls=False, mcp_servers={"everything": everything()}) as ex:
                return [item async for item in ex.stream(ECHO.format("free"))]

        items = self.run_async(run(), timeout=180)
        self.assertEqual(len(items), 1, items)
        self.assertEqual(items[0].text, "Echo: free")

    def test_tool_approval_without_shell_approval(self):
        async def run():
            async with self.executor(mcp_servers={"everything": everything()}) as ex:
                items = []
                async for item in ex.stream("!echo shell-free\n" + ECHO.format("asked")):
                    items.append(item)
                    if isinstance(item, ApprovalRequest):
                        await item.accept()
                return items

        items = self.run_async(run(), timeout=180)
        self.assertEqual([type(i).__name__ for i in items], ["ApprovalRequest", "CodeExecutionResult"])
        self.assertEqual(items[0].tool_name, "echo")
        self.assertEqual(items[1].text, "shell-free\nEcho: asked")

    def test_generate_mcp_sources_then_execute(self):
        # Upstream's flow: generate the modules into <workspace>/mcptools,
        # then an executor in that workspace calls them.
        ws = new_workspace()

        async def run():
            names = await generate_mcp_sources("everything", everything(), ws / "mcptools", binary=binary())
            async with self.executor(working_dir=ws) as ex:
                return names, await ex.execute(ECHO.format("generated"))

        names, r = self.run_async(run(), timeout=180)
        self.assertIn("echo", names)
        self.assertTrue((ws / "mcptools" / "everything" / "echo.py").is_file())
        self.assertEqual(r.text, "Echo: generated")

    def test_generate_mcp_sources_bad_params(self):
        out = new_workspace()
        with self.assertRaisesRegex(RuntimeError, "/nonexistent/server"):
            self.run_async(generate_mcp_sources("bad", {"command": "/nonexistent/server"}, out, binary=binary()), timeout=60)
        with self.assertRaisesRegex(ValueError, "nope"):
            self.run_async(generate_mcp_sources("bad", {"nope": 1}, out, binary=binary()), timeout=60)
        with self.assertRaisesRegex(RuntimeError, "escape"):
            self.run_async(generate_mcp_sources("../escape", everything(), out, binary=binary()), timeout=60)
        self.assertEqual(os.listdir(out), [])


class SyncTest(unittest.TestCase):
    def test_sync_executor(self):
        seen = []
        chunks = []
        with SyncCodeExecutor(binary=binary(), working_dir=shared_workspace(), kernel_init_timeout=90, mcp_servers={"everything": everything()}) as ex:
            self.assertEqual(ex.execute("print(6 * 7)").text, "42")
            r = ex.execute("print('a', flush=True)\n" + ECHO.format("sync"), on_chunk=chunks.append)
            self.assertEqual(r.text, "a\nEcho: sync")
            self.assertEqual("".join(chunks), "a\nEcho: sync\n")
            with self.assertRaises(CodeExecutionError):
                ex.execute(ECHO.format("no"), approve=lambda q: seen.append(q) or False)
            self.assertEqual([q.tool_name for q in seen], ["echo"])
            ex.reset()
            self.assertIsInstance(ex.execute("1"), CodeExecutionResult)
        with self.assertRaisesRegex(RuntimeError, "closed"):
            ex.execute("1")

    def test_sync_inside_loop_refused(self):
        async def inside():
            SyncCodeExecutor(binary=binary()).start()

        with self.assertRaisesRegex(RuntimeError, "inside an event loop"):
            asyncio.run(inside())


class ProcessTest(LoopTestCase):
    def test_bad_python(self):
        ws = new_workspace()
        fake = new_workspace() / "fake-python"  # outside the workspace
        fake.write_text("#!/bin/sh\nexit 1\n")
        fake.chmod(0o755)
        ex = CodeExecutor(binary=binary(), working_dir=ws, python=str(fake))
        with self.assertRaisesRegex(RuntimeError, "fake-python") as cm:
            self.run_async(ex.start(), timeout=60)
        self.assertIn("ipykernel", str(cm.exception))

    def test_python_in_the_workspace_refused(self):
        # Kernel code can write the workspace: the host never runs an
        # interpreter from there (invariant 14), and says what to do.
        ws = new_workspace()
        fake = ws / "fake-python"
        fake.write_text("#!/bin/sh\nexit 1\n")
        fake.chmod(0o755)
        ex = CodeExecutor(binary=binary(), working_dir=ws, python=str(fake))
        with self.assertRaisesRegex(RuntimeError, "kernel code can write") as cm:
            self.run_async(ex.start(), timeout=60)
        self.assertIn("outside the workspace", str(cm.exception))

    def test_sandbox(self):
        if shutil.which("bwrap") is None:
            if os.environ.get("CI") == "true":
                self.fail("required in CI: bwrap")
            self.skipTest("skipped (missing): bwrap")

        async def run():
            async with CodeExecutor(binary=binary(), working_dir=new_workspace(), sandbox=True, kernel_init_timeout=90,
                                    mcp_servers={"everything": everything()}) as ex:
                inside = await ex.execute("import os\nprint(os.path.exists('/home'), b'__sandbox-init' in open('/proc/1/cmdline', 'rb').read())")
                tool = await ex.execute(ECHO.format("sandboxed"))
                return inside, tool

        inside, tool = self.run_async(run(), timeout=180)
        self.assertEqual(inside.text, "False True")
        self.assertEqual(tool.text, "Echo: sandboxed")

    def test_parent_killed(self):
        # The application dies without stopping the executor: ipybox mcp
        # sees its standard input close, and it and its kernel end.
        ws = new_workspace()
        script = (
            "import asyncio, sys\n"
            "from ipybox import CodeExecutor\n"
            "async def main():\n"
            f"    async with CodeExecutor(binary={binary()!r}, working_dir={str(ws)!r}) as ex:\n"
            "        await ex.execute('x = 1')\n"
            "        print(ex._client.pid, flush=True)\n"
            "        await asyncio.sleep(300)\n"
            "asyncio.run(main())\n"
        )
        env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[1]))
        p = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, env=env, text=True)
        try:
            line = p.stdout.readline()
            server = int(line)
            self.assertTrue(processes_in(ws), "no kernel")
            p.kill()
            p.wait(10)
            deadline = time.monotonic() + 30
            while (alive(server) or processes_in(ws)) and time.monotonic() < deadline:
                time.sleep(0.1)
            self.assertFalse(alive(server), "ipybox mcp outlived its parent")
            self.assertEqual(processes_in(ws), [], "kernels outlived the parent")
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
            p.stdout.close()

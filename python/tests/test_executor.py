"""CodeExecutor against the real binary, a real kernel and server-everything.

The tests share one executor (approvals of tool calls and of shell commands
on) and run in one event loop; each leaves the kernel usable.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from ipybox import (
    ApprovalRequest,
    CodeExecutionChunk,
    CodeExecutionError,
    CodeExecutionResult,
    CodeExecutor,
    KernelDiedError,
)

from ._support import LoopTestCase, binary, everything, shared_workspace

ECHO = "from mcptools.everything.echo import Params, run\nprint(run(Params(message={!r})))"


async def collect(agen, decide=None):
    """All items of a stream; approvals are answered by decide(item) -> bool."""
    items = []
    async for item in agen:
        items.append(item)
        if isinstance(item, ApprovalRequest):
            if decide is None or decide(item):
                await item.accept()
            else:
                await item.reject()
    return items


class ExecutorTest(LoopTestCase):
    @classmethod
    def setUpClass(cls) -> None:
        super().setUpClass()
        cls.ws = shared_workspace()
        cls.ex = CodeExecutor(
            binary=binary(),
            working_dir=cls.ws,
            approve_shell_cmds=True,
            mcp_servers={"everything": everything()},
            kernel_init_timeout=90,
        )
        cls.run_async(cls.ex.start())

    @classmethod
    def tearDownClass(cls) -> None:
        cls.run_async(cls.ex.stop())
        super().tearDownClass()

    def execute(self, code: str, **kw) -> CodeExecutionResult:
        return self.run_async(self.ex.execute(code, **kw))

    def stream(self, code: str, decide=None, **kw) -> list:
        return self.run_async(collect(self.ex.stream(code, **kw), decide))

    def test_state_persists(self):
        self.execute("x = 41")
        self.assertEqual(self.execute("print(x + 1)").text, "42")
        self.assertEqual(self.execute("x * 2").text, "82")

    def test_no_output_is_none(self):
        r = self.execute("y = 1")
        self.assertIsNone(r.text)
        self.assertEqual(r.images, [])
        self.assertIsNone(self.execute("").text)

    def test_python_error(self):
        with self.assertRaises(CodeExecutionError) as cm:
            self.execute("print('before')\n1/0")
        e = cm.exception
        msg = str(e)
        self.assertTrue(msg.startswith("ZeroDivisionError: division by zero\n"), msg)
        self.assertIn("1/0", msg)
        self.assertEqual((e.name, e.value, e.text), ("ZeroDivisionError", "division by zero", "before"))
        self.assertIn("1/0", e.traceback)

    def test_chunks_in_order_nothing_lost(self):
        code = (
            "import sys, time\n"
            "for i in range(50):\n"
            "    print(f'line {i}', flush=True)\n"
            "    if i % 10 == 0: time.sleep(0.01)\n"
            "print('to stderr', file=sys.stderr, flush=True)\n"
            "for i in range(3000):\n"
            "    print('x' * 60, i)\n"
            "print('end')"
        )
        items = self.stream(code, chunks=True)
        self.assertIsInstance(items[-1], CodeExecutionResult)
        chunks = items[:-1]
        self.assertTrue(all(isinstance(c, CodeExecutionChunk) for c in chunks), items[:5])
        self.assertGreater(len(chunks), 3)
        got = "".join(c.text for c in chunks)
        want = "".join(f"line {i}\n" for i in range(50)) + "to stderr\n" + "".join(f"{'x' * 60} {i}\n" for i in range(3000)) + "end\n"
        self.assertEqual(got, want)
        self.assertEqual(items[-1].text, want.rstrip("\n"))

    def test_no_chunks_without_chunks(self):
        items = self.stream("print('a')\nprint('b')")
        self.assertEqual(len(items), 1)
        self.assertEqual(items[0].text, "a\nb")

    def test_tool_call_approved(self):
        items = self.stream("print('before')\n" + ECHO.format("hi"), chunks=True)
        kinds = [type(i).__name__ for i in items]
        self.assertEqual(kinds, ["CodeExecutionChunk", "ApprovalRequest", "CodeExecutionChunk", "CodeExecutionResult"], items)
        self.assertEqual(items[0].text, "before\n")  # printed before the call: it comes first
        req = items[1]
        self.assertEqual((req.server_name, req.tool_name, req.tool_args), ("everything", "echo", {"message": "hi"}))
        self.assertEqual(str(req), "everything.echo(message='hi')")
        self.assertTrue(self.run_async(req.response()))
        self.assertEqual(items[-1].text, "before\nEcho: hi")

    def test_tool_call_rejected(self):
        with self.assertRaises(CodeExecutionError) as cm:
            self.stream("print('before')\n" + ECHO.format("no"), decide=lambda r: False)
        self.assertEqual(cm.exception.name, "ApprovalRejectedError")
        self.assertEqual(cm.exception.text, "before")
        # The rejection raised in the kernel: code can catch it.
        r = self.stream(
            "from ipybox_runtime import ApprovalRejectedError\ntry:\n    " + ECHO.format("no").replace("\n", "\n    ") + "\nexcept ApprovalRejectedError as e:\n    print('caught')",
            decide=lambda r: False,
        )
        self.assertEqual(r[-1].text, "caught")

    def test_execute_accepts_approvals(self):
        self.assertEqual(self.execute(ECHO.format("auto")).text, "Echo: auto")

    def test_shell_approval(self):
        seen = []
        r = self.stream("!echo from-shell", decide=lambda q: seen.append(q) or True)
        self.assertEqual(r[-1].text, "from-shell")
        self.assertEqual([(q.server_name, q.tool_name, q.tool_args) for q in seen], [("ipybox", "shell", {"cmd": "echo from-shell"})])
        seen.clear()
        with self.assertRaises(CodeExecutionError) as cm:
            self.stream("%%bash\necho magic", decide=lambda q: seen.append(q) or False)
        self.assertEqual(cm.exception.name, "ApprovalRejectedError")
        self.assertEqual([(q.server_name, q.tool_name) for q in seen], [("ipybox", "shell_magic")])
        self.assertTrue(seen[0].tool_args["cmd"].startswith("%%bash"), seen[0].tool_args)

    def test_timeout_keeps_state(self):
        self.execute("kept = 'yes'")
        t0 = time.monotonic()
        with self.assertRaises(asyncio.TimeoutError):
            self.execute("import time\ntime.sleep(30)", timeout=1)
        self.assertLess(time.monotonic() - t0, 15)
        self.assertEqual(self.execute("print(kept)").text, "yes")

    def test_timeout_excludes_approval_wait(self):
        # 2.5s of running plus 1.2s of waiting for the approval: over the
        # 3s timeout on the wall clock, within it on the cell's budget. (An
        # approval may wait no longer than the cell's remaining time.)
        code = "import time\ntime.sleep(1.5)\n" + ECHO.format("slow") + "\ntime.sleep(1.0)"

        async def slow_accept():
            t0 = time.monotonic()
            async for item in self.ex.stream(code, timeout=3):
                if isinstance(item, ApprovalRequest):
                    await asyncio.sleep(1.2)
                    await item.accept()
                elif isinstance(item, CodeExecutionResult):
                    return item, time.monotonic() - t0

        r, took = self.run_async(slow_accept())
        self.assertEqual(r.text, "Echo: slow")
        self.assertGreater(took, 3)

    def test_plot(self):
        r = self.execute("import matplotlib\nmatplotlib.use('module://matplotlib_inline.backend_inline')\nimport matplotlib.pyplot as plt\nplt.plot([1, 3, 2]); plt.show()")
        self.assertEqual(len(r.images), 1, r)
        img = r.images[0]
        self.assertIsInstance(img, Path)
        self.assertEqual(img.parent, self.ws / "images")
        self.assertEqual(img.read_bytes()[:4], b"\x89PNG")

    def test_reset(self):
        self.execute("gone = 1")
        self.run_async(self.ex.reset())
        with self.assertRaises(CodeExecutionError) as cm:
            self.execute("gone")
        self.assertEqual(cm.exception.name, "NameError")
        # Tool modules and registrations survive.
        self.assertEqual(self.execute(ECHO.format("after reset")).text, "Echo: after reset")

    def test_kernel_death(self):
        self.execute("doomed = 1")
        with self.assertRaises(KernelDiedError) as cm:
            self.execute("import os\nos._exit(3)")
        self.assertIn("died", str(cm.exception))
        with self.assertRaises(CodeExecutionError) as cm:
            self.execute("doomed")
        self.assertEqual(cm.exception.name, "NameError")  # a fresh kernel

    def test_register_mcp_server(self):
        names = self.run_async(self.ex.register_mcp_server("everything2", everything()))
        self.assertIn("echo", names)
        self.assertIn("get_sum", names)
        self.assertTrue((self.ws / "mcptools" / "everything2" / "echo.py").is_file())
        r = self.execute("from mcptools.everything2.echo import Params, run\nprint(run(Params(message='two')))")
        self.assertEqual(r.text, "Echo: two")

    def test_bad_server_params(self):
        with self.assertRaisesRegex(CodeExecutionError, "/nonexistent/server"):
            self.run_async(self.ex.register_mcp_server("bad", {"command": "/nonexistent/server"}))
        with self.assertRaisesRegex(Exception, "nope"):
            self.run_async(self.ex.register_mcp_server("bad", {"nope": 1}))
        with self.assertRaisesRegex(Exception, "server_name"):
            self.run_async(self.ex.register_mcp_server("../escape", {"command": "true"}))
        with self.assertRaises(TypeError):
            self.run_async(self.ex.register_mcp_server("bad", "not a dict"))  # type: ignore[arg-type]
        self.assertEqual(self.execute("print('still fine')").text, "still fine")

    def test_cancelled_stream(self):
        async def break_early():
            agen = self.ex.stream("import time\nfor i in range(300):\n    print(i, flush=True)\n    time.sleep(0.1)", chunks=True)
            async for item in agen:
                self.assertIsInstance(item, CodeExecutionChunk)
                break
            await agen.aclose()

        t0 = time.monotonic()
        self.run_async(break_early(), timeout=20)
        self.assertEqual(self.execute("print('next')", timeout=20).text, "next")
        self.assertLess(time.monotonic() - t0, 15)

    def test_cancelled_task(self):
        t0 = time.monotonic()
        with self.assertRaises(asyncio.TimeoutError):
            self.run_async(self.ex.execute("import time\ntime.sleep(30)"), timeout=1)
        self.assertEqual(self.execute("print('after cancel')", timeout=20).text, "after cancel")
        self.assertLess(time.monotonic() - t0, 15)

    def test_unanswered_approval_is_rejected_on_close(self):
        async def walk_away():
            agen = self.ex.stream(ECHO.format("never"))
            async for item in agen:
                self.assertIsInstance(item, ApprovalRequest)
                break
            await agen.aclose()

        self.run_async(walk_away(), timeout=20)
        self.assertEqual(self.execute("print('ok')", timeout=20).text, "ok")

    def test_bad_arguments(self):
        with self.assertRaises(ValueError):
            self.execute("pass", timeout=0)
        with self.assertRaises(TypeError):
            self.execute(b"pass")  # type: ignore[arg-type]

    def test_cancel(self):
        async def run():
            agen = self.ex.stream("import time\ntime.sleep(30)")
            task = asyncio.ensure_future(agen.__anext__())
            await asyncio.sleep(0.5)
            await self.ex.cancel()
            with self.assertRaisesRegex(CodeExecutionError, "cancelled"):
                await asyncio.wait_for(task, 10)

        t0 = time.monotonic()
        self.run_async(run(), timeout=20)
        self.assertEqual(self.execute("print('after')").text, "after")
        self.assertLess(time.monotonic() - t0, 10)

    def test_concurrent_calls_take_turns(self):
        async def both():
            return await asyncio.gather(
                self.ex.execute("import time\nturn = 'first'\ntime.sleep(0.3)\nprint(turn)"),
                self.ex.execute("turn = 'second'\nprint(turn)"),
            )

        a, b = self.run_async(both())
        self.assertEqual((a.text, b.text), ("first", "second"))

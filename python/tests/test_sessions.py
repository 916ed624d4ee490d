"""Sessions by handle over streamable HTTP: an ``ipybox mcp --http`` that
outlives its clients, a program that comes back to its kernel, and a
principal that cannot use another's handle."""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import tempfile
import time

from ipybox import ApprovalRequest, CodeExecutionChunk, CodeExecutionError, CodeExecutionResult, CodeExecutor

from ._support import LoopTestCase, binary, new_workspace

TOKEN = "python-test-token-0123456789"
OTHER = "python-other-token-0123456789"


class SessionsTest(LoopTestCase):
    @classmethod
    def setUpClass(cls) -> None:
        super().setUpClass()
        cls.ws = new_workspace()
        fd, cls.tokens = tempfile.mkstemp(prefix="ipybox-tokens-")
        with os.fdopen(fd, "w") as f:
            f.write(f"me:{TOKEN}\nother:{OTHER}\n")
        cls.server = subprocess.Popen(
            [binary(), "mcp", "--http", "127.0.0.1:0", "--auth-token-file", cls.tokens, "--workspace", str(cls.ws),
             "--no-sandbox", "--pool", "0", "--approval", "elicit"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        )
        deadline = time.monotonic() + 60
        cls.url = None
        while time.monotonic() < deadline:
            line = cls.server.stderr.readline()
            if not line:
                break
            m = re.search(r"serving streamable HTTP at (http://\S+/mcp)", line)
            if m:
                cls.url = m.group(1)
                break
        if cls.url is None:
            cls.server.kill()
            raise RuntimeError("ipybox mcp --http did not start")

    @classmethod
    def tearDownClass(cls) -> None:
        cls.server.terminate()
        try:
            cls.server.wait(30)
        except subprocess.TimeoutExpired:
            cls.server.kill()
            cls.server.wait()
        cls.server.stderr.close()
        os.unlink(cls.tokens)
        super().tearDownClass()

    def executor(self, **kw) -> CodeExecutor:
        kw.setdefault("auth_token", TOKEN)
        kw.setdefault("kernel_init_timeout", 90)
        return CodeExecutor(server_url=self.url, approve_shell_cmds=True, **kw)

    def test_fork(self):
        async def go() -> tuple[str, str, str]:
            async with self.executor() as ex:
                await ex.execute("xs = [1]")
                handles = await ex.fork(2)
                self.assertEqual(len(handles), 2)
                async with self.executor(session=handles[0]) as f:
                    a = (await f.execute("xs.append(2); print(xs)")).text
                async with self.executor(session=handles[1]) as f:
                    b = (await f.execute("print(xs)")).text
                return a, b, (await ex.execute("print(xs)")).text

        a, b, src = self.run_async(go(), timeout=180)
        self.assertEqual((a, b, src), ("[1, 2]", "[1]", "[1]"))

    def test_rewind(self):
        fd, tokens = tempfile.mkstemp(prefix="ipybox-tokens-")
        with os.fdopen(fd, "w") as f:
            f.write(f"me:{TOKEN}\n")
        p = subprocess.Popen(
            [binary(), "mcp", "--http", "127.0.0.1:0", "--auth-token-file", tokens, "--workspace", str(self.ws),
             "--no-sandbox", "--pool", "0", "--rewind-depth", "2"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        )
        try:
            url = None
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and url is None:
                line = p.stderr.readline()
                if not line:
                    break
                m = re.search(r"serving streamable HTTP at (http://\S+/mcp)", line)
                url = m.group(1) if m else None
            self.assertIsNotNone(url)

            async def go():
                async with CodeExecutor(server_url=url, auth_token=TOKEN, kernel_init_timeout=90) as ex:
                    await ex.execute("xs = [1]")
                    await ex.execute("xs.append(2); del xs")
                    rep = await ex.rewind(1)
                    res = await ex.execute("print(xs)")
                    with self.assertRaises(CodeExecutionError):
                        await ex.rewind(3)
                    return rep, res

            rep, res = self.run_async(go(), timeout=180)
            self.assertEqual(rep.get("cells"), 1)
            self.assertEqual(res.text, "[1]")
            self.assertTrue(any("rewound" in w for w in res.warnings), res.warnings)
        finally:
            p.terminate()
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
            p.stderr.close()
            os.unlink(tokens)

    def test_come_back_to_the_kernel(self):
        async def first() -> str:
            ex = self.executor(keep_session=True)
            async with ex:
                await ex.execute("x = 41")
                return ex.session

        handle = self.run_async(first(), timeout=120)
        self.assertTrue(handle.startswith("ipy_"), handle)

        async def again() -> list:
            async with self.executor(session=handle, keep_session=True) as ex:
                items = []
                code = "import sys, time\nfor i in range(3):\n    sys.stdout.write(f'{i}\\n'); sys.stdout.flush(); time.sleep(0.1)\n!echo shell\nprint(x + 1)"
                async for item in ex.stream(code, chunks=True):
                    items.append(item)
                    if isinstance(item, ApprovalRequest):
                        await item.accept()
                return items

        items = self.run_async(again(), timeout=120)
        kinds = [type(i).__name__ for i in items]
        self.assertEqual(kinds, ["CodeExecutionChunk"] * 3 + ["ApprovalRequest"] + ["CodeExecutionChunk"] * 2 + ["CodeExecutionResult"], items)
        self.assertEqual("".join(i.text for i in items if isinstance(i, CodeExecutionChunk)).replace("\r\n", "\n"), "0\n1\n2\nshell\n42\n")
        self.assertEqual(items[3].tool_args, {"cmd": "echo shell"})
        self.assertEqual(items[-1].text, "0\n1\n2\nshell\n42")

        # Another principal: the handle is unknown to it.
        with self.assertRaisesRegex(RuntimeError, "unknown session"):
            self.run_async(self.executor(session=handle, auth_token=OTHER).start(), timeout=60)

        # Closing it ends it.
        async def close() -> None:
            ex = self.executor(session=handle)
            await ex.start()
            await ex.close_session()

        self.run_async(close(), timeout=60)
        with self.assertRaisesRegex(RuntimeError, "unknown session"):
            self.run_async(self.executor(session=handle).start(), timeout=60)

    def test_stop_ends_the_session_by_default(self):
        async def run() -> str:
            async with self.executor() as ex:
                self.assertEqual((await ex.execute("print('up')")).text, "up")
                return ex.session

        handle = self.run_async(run(), timeout=120)
        with self.assertRaisesRegex(RuntimeError, "unknown session"):
            self.run_async(self.executor(session=handle).start(), timeout=60)

    def test_unknown_handle_is_not_a_kernel_failure(self):
        with self.assertRaises(RuntimeError) as cm:
            self.run_async(self.executor(session="ipy_" + "A" * 26).start(), timeout=60)
        self.assertIn("unknown session", str(cm.exception))
        self.assertNotIn("could not start a kernel", str(cm.exception))

    def test_restore_note_in_first_result(self):
        """The note of a restored session reaches the first result's
        warnings (it came only to the logger, from the start-up cell)."""
        ws = new_workspace()

        def serve() -> tuple[subprocess.Popen, str]:
            p = subprocess.Popen(
                [binary(), "mcp", "--http", "127.0.0.1:0", "--auth-token-file", self.tokens, "--workspace", str(ws),
                 "--no-sandbox", "--pool", "0"],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
            )
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                line = p.stderr.readline()
                if not line:
                    break
                m = re.search(r"serving streamable HTTP at (http://\S+/mcp)", line)
                if m:
                    return p, m.group(1)
            p.kill()
            raise RuntimeError("ipybox mcp --http did not start")

        def stop(p: subprocess.Popen) -> None:
            p.terminate()  # hibernates every session
            try:
                p.wait(60)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
            p.stderr.close()

        async def first(url: str) -> str:
            async with CodeExecutor(server_url=url, auth_token=TOKEN, keep_session=True, kernel_init_timeout=90) as ex:
                await ex.execute("x = 41")
                return ex.session

        async def again(url: str, handle: str) -> CodeExecutionResult:
            async with CodeExecutor(server_url=url, auth_token=TOKEN, session=handle, kernel_init_timeout=90) as ex:
                return await ex.execute("print(x + 1)")

        p, url = serve()
        try:
            handle = self.run_async(first(url), timeout=120)
        finally:
            stop(p)
        p, url = serve()
        try:
            res = self.run_async(again(url, handle), timeout=120)
        finally:
            stop(p)
        self.assertEqual(res.text, "42")
        self.assertTrue(any("restored" in w or "hibernat" in w or "stopped" in w for w in res.warnings), res.warnings)

    def test_wrong_token(self):
        with self.assertRaisesRegex(Exception, "401"):
            self.run_async(self.executor(auth_token="wrong-token-0123456789").start(), timeout=60)

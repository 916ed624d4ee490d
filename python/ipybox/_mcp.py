"""A minimal MCP client over stdio: JSON-RPC 2.0, one message per line.

It speaks just what ``ipybox mcp`` needs: the initialize handshake, requests
and their responses, notifications both ways, and requests from the server
(elicitation, ping), which it hands to a callback. Every wait is bounded or
ends when the process does, and ``close`` always reaps the process.
"""

from __future__ import annotations

import asyncio
import collections
import itertools
import json
import logging
import os
import signal
from typing import Any, Callable

logger = logging.getLogger("ipybox")

# The classic (session) protocol: elicitation is a request from the server.
PROTOCOL_VERSION = "2025-11-25"

# Longest message line read from the server. Image blocks make results
# large; ipybox bounds one image at 16 MiB and the text by max_output_chars.
_LINE_LIMIT = 1 << 30

# How many lines of the server's standard error are kept for error messages.
_STDERR_LINES = 40


class MCPError(Exception):
    """A JSON-RPC error answered by the server."""

    def __init__(self, method: str, error: dict[str, Any]):
        self.method = method
        self.code = error.get("code")
        self.data = error.get("data")
        message = error.get("message", "")
        super().__init__(f"{method}: {message} (JSON-RPC error {self.code})")


class ServerExited(ConnectionError):
    """The server process ended, or its connection broke."""


class StdioClient:
    """One ``ipybox mcp`` process and its JSON-RPC connection.

    ``on_notification(msg)`` gets every notification; ``on_request(msg)``
    gets every request from the server except ping, and must answer it
    with ``respond`` or ``respond_error``.
    """

    def __init__(
        self,
        argv: list[str],
        *,
        env: dict[str, str] | None = None,
        on_notification: Callable[[dict[str, Any]], None],
        on_request: Callable[[dict[str, Any]], None],
    ):
        self._argv = argv
        self._env = env
        self._on_notification = on_notification
        self._on_request = on_request
        self._proc: asyncio.subprocess.Process | None = None
        self._ids = itertools.count(1)
        self._pending: dict[int, tuple[str, asyncio.Future]] = {}
        self._stderr: collections.deque[str] = collections.deque(maxlen=_STDERR_LINES)
        self._tasks: list[asyncio.Task] = []
        self._exited: asyncio.Event | None = None
        self._exit_reason = ""
        self.server_info: dict[str, Any] = {}

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    def stderr_tail(self) -> str:
        return "\n".join(self._stderr)

    def _exit_error(self) -> ServerExited:
        msg = f"ipybox mcp ({self._argv[0]}) {self._exit_reason or 'is not running'}"
        tail = self.stderr_tail().strip()
        if tail:
            msg += f"; its last messages:\n{tail}"
        return ServerExited(msg)

    async def start(self, timeout: float) -> None:
        """Start the process and make the initialize handshake, within timeout seconds."""
        self._exited = asyncio.Event()
        try:
            self._proc = await asyncio.create_subprocess_exec(
                *self._argv,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                env=self._env,
                limit=_LINE_LIMIT,
                # Its own session: a Ctrl-C meant for the application does
                # not reach the server; close() stops it.
                start_new_session=True,
            )
        except OSError as e:
            raise FileNotFoundError(f"cannot run {self._argv[0]}: {e}") from e
        self._tasks = [
            asyncio.ensure_future(self._read_stdout()),
            asyncio.ensure_future(self._read_stderr()),
        ]
        try:
            result = await self.request(
                "initialize",
                {
                    "protocolVersion": PROTOCOL_VERSION,
                    "capabilities": {"elicitation": {"form": {}}},
                    "clientInfo": {"name": "ipybox-python", "version": "0.1"},
                },
                timeout=timeout,
            )
        except asyncio.TimeoutError:
            raise asyncio.TimeoutError(
                f"ipybox mcp did not answer initialize within {timeout}s (connect_timeout)"
            ) from None
        self.server_info = result
        await self.notify("notifications/initialized", {})

    # --- sending -----------------------------------------------------------

    async def _write(self, msg: dict[str, Any]) -> None:
        if self._proc is None or self._exited is None or self._exited.is_set():
            raise self._exit_error()
        data = json.dumps(msg, separators=(",", ":"), ensure_ascii=False).encode() + b"\n"
        try:
            self._proc.stdin.write(data)
            await self._proc.stdin.drain()
        except (ConnectionError, RuntimeError) as e:
            raise self._exit_error() from e

    def send_request(self, method: str, params: dict[str, Any]) -> tuple[int, asyncio.Future]:
        """Send a request; return its id and the future of its result."""
        if self._proc is None or self._exited is None or self._exited.is_set():
            raise self._exit_error()
        rid = next(self._ids)
        fut = asyncio.get_running_loop().create_future()
        self._pending[rid] = (method, fut)
        msg = {"jsonrpc": "2.0", "id": rid, "method": method, "params": params}
        data = json.dumps(msg, separators=(",", ":"), ensure_ascii=False).encode() + b"\n"
        stdin = self._proc.stdin
        try:
            # write() does not block: the transport buffers what the pipe
            # does not take. Drain (flow control) only when it holds much.
            stdin.write(data)
        except (ConnectionError, RuntimeError) as e:
            self._pending.pop(rid, None)
            raise self._exit_error() from e
        if stdin.transport.get_write_buffer_size() > 1 << 20:
            asyncio.ensure_future(self._safe(stdin.drain()))
        return rid, fut

    def forget(self, rid: int) -> None:
        """Stop waiting for the response to request rid."""
        entry = self._pending.pop(rid, None)
        if entry and not entry[1].done():
            entry[1].cancel()

    async def request(self, method: str, params: dict[str, Any], timeout: float | None) -> Any:
        rid, fut = self.send_request(method, params)
        try:
            return await asyncio.wait_for(asyncio.shield(fut), timeout)
        except BaseException:
            self.forget(rid)
            raise

    async def notify(self, method: str, params: dict[str, Any]) -> None:
        await self._write({"jsonrpc": "2.0", "method": method, "params": params})

    async def respond(self, rid: Any, result: dict[str, Any]) -> None:
        await self._write({"jsonrpc": "2.0", "id": rid, "result": result})

    async def respond_error(self, rid: Any, code: int, message: str) -> None:
        await self._write({"jsonrpc": "2.0", "id": rid, "error": {"code": code, "message": message}})

    # --- receiving ---------------------------------------------------------

    async def _read_stdout(self) -> None:
        assert self._proc is not None and self._exited is not None
        reason = "closed its standard output"
        try:
            while True:
                line = await self._proc.stdout.readline()
                if not line:
                    break
                try:
                    msg = json.loads(line)
                except ValueError:
                    logger.warning("ipybox mcp wrote a line that is not JSON: %.200r", line)
                    continue
                if isinstance(msg, dict):
                    self._dispatch(msg)
        except (ValueError, asyncio.LimitOverrunError) as e:
            reason = f"wrote a message over {_LINE_LIMIT} bytes ({e})"
        except asyncio.CancelledError:
            reason = "was closed"
            raise
        finally:
            # Let the process end (or be reaped) before saying why.
            try:
                code = await asyncio.wait_for(asyncio.shield(self._proc.wait()), 2)
                reason = f"exited with status {code}" if code >= 0 else f"was killed by signal {-code}"
            except (asyncio.TimeoutError, asyncio.CancelledError):
                pass
            self._exit_reason = reason
            self._exited.set()
            err = self._exit_error()
            for _, fut in list(self._pending.values()):
                if not fut.done():
                    fut.set_exception(err)
            self._pending.clear()
            try:
                self._on_notification({"method": "$/exited"})
            except Exception:  # the callback's own bug must not hide the exit
                logger.exception("ipybox: notification handler failed")

    async def _read_stderr(self) -> None:
        assert self._proc is not None
        while True:
            line = await self._proc.stderr.readline()
            if not line:
                return
            text = line.decode(errors="replace").rstrip("\n")
            self._stderr.append(text)
            logger.debug("ipybox mcp: %s", text)

    def _dispatch(self, msg: dict[str, Any]) -> None:
        method = msg.get("method")
        if method is None:
            entry = self._pending.pop(msg.get("id"), None)  # type: ignore[arg-type]
            if entry is None:
                return  # a response we stopped waiting for
            name, fut = entry
            if fut.done():
                return
            if "error" in msg:
                fut.set_exception(MCPError(name, msg["error"] or {}))
            else:
                fut.set_result(msg.get("result"))
            return
        if "id" in msg:
            if method == "ping":
                asyncio.ensure_future(self._safe(self.respond(msg["id"], {})))
            else:
                self._on_request(msg)
            return
        self._on_notification(msg)

    @staticmethod
    async def _safe(aw) -> None:
        try:
            await aw
        except (ServerExited, ConnectionError):
            pass

    # --- closing -----------------------------------------------------------

    async def close(self, grace: float = 10.0) -> None:
        """Stop the server and reap it: close its standard input (it stops
        its kernels and exits), then SIGTERM, then SIGKILL, each after a
        bounded wait."""
        proc = self._proc
        if proc is None:
            return
        if proc.returncode is None:
            try:
                proc.stdin.close()
            except (OSError, RuntimeError):
                pass
            for sig, wait in ((None, grace), (signal.SIGTERM, 5.0), (signal.SIGKILL, 5.0)):
                if sig is not None:
                    try:
                        os.killpg(proc.pid, sig)
                    except ProcessLookupError:
                        pass
                try:
                    await asyncio.wait_for(asyncio.shield(proc.wait()), wait)
                    break
                except asyncio.TimeoutError:
                    logger.warning("ipybox mcp (pid %d) did not exit in %.0fs; escalating", proc.pid, wait)
        for t in self._tasks:
            try:
                await asyncio.wait_for(asyncio.shield(t), 5)
            except asyncio.TimeoutError:
                t.cancel()
            except (asyncio.CancelledError, Exception):
                pass
        # Close the pipes' transports now rather than at garbage collection.
        transport = getattr(proc, "_transport", None)
        if transport is not None:
            transport.close()

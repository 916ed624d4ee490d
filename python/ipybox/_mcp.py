"""A minimal MCP client for ``ipybox mcp``, over stdio or streamable HTTP.

It speaks MCP 2026-07-28: ``server/discover`` instead of a handshake, the
protocol version, client info and capabilities in every request's
``_meta``, no sessions of the transport (state lives behind the handles of
``create_session``), and approvals as input-required results that the
caller answers by calling again. It speaks just what ``ipybox mcp``
needs: requests and their responses, and notifications both ways. Every
wait is bounded or ends when the server does, and ``close`` always reaps
what it started.
"""

from __future__ import annotations

import asyncio
import collections
import http.client
import itertools
import json
import logging
import os
import signal
import socket
import threading
import urllib.parse
from typing import Any, Callable

from ._version import __version__

logger = logging.getLogger("ipybox")

PROTOCOL_VERSION = "2026-07-28"
CLIENT_INFO = {"name": "ipybox-python", "version": __version__}
# Elicitation (form): the server asks about approvals instead of rejecting
# them; the questions come back as input-required results.
CAPABILITIES = {"elicitation": {"form": {}}}

# Longest message line read from the server. Image blocks make results
# large; ipybox bounds one image at 16 MiB and the text by max_output_chars.
_LINE_LIMIT = 1 << 30

# How many lines of the server's standard error are kept for error messages.
_STDERR_LINES = 40


def request_meta() -> dict[str, Any]:
    """The ``_meta`` every 2026-07-28 request carries."""
    return {
        "io.modelcontextprotocol/protocolVersion": PROTOCOL_VERSION,
        "io.modelcontextprotocol/clientInfo": CLIENT_INFO,
        "io.modelcontextprotocol/clientCapabilities": CAPABILITIES,
    }


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


class Client:
    """The JSON-RPC side of a connection to ``ipybox mcp``; StdioClient and
    HTTPClient carry its messages.

    ``on_notification(msg)`` gets every notification, in the order the
    server sent them, and before the response that follows them; and
    ``{"method": "$/exited"}`` when the server is gone.
    """

    def __init__(self, on_notification: Callable[[dict[str, Any]], None]):
        self._on_notification = on_notification
        self._ids = itertools.count(1)
        self._pending: dict[int, tuple[str, asyncio.Future]] = {}
        self.server_info: dict[str, Any] = {}

    # --- for subclasses -------------------------------------------------------

    def _send(self, rid: int, msg: dict[str, Any]) -> None:
        raise NotImplementedError

    def _exit_error(self) -> ServerExited:
        raise NotImplementedError

    def cancel(self, rid: int, reason: str) -> None:
        """Ask the server to stop request rid (its cell is interrupted)."""
        raise NotImplementedError

    # --- requests ---------------------------------------------------------------

    def send_request(self, method: str, params: dict[str, Any]) -> tuple[int, asyncio.Future]:
        """Send a request; return its id and the future of its result."""
        rid = next(self._ids)
        fut = asyncio.get_running_loop().create_future()
        params = dict(params)
        params["_meta"] = {**(params.get("_meta") or {}), **request_meta()}
        self._pending[rid] = (method, fut)
        try:
            self._send(rid, {"jsonrpc": "2.0", "id": rid, "method": method, "params": params})
        except BaseException:
            self._pending.pop(rid, None)
            raise
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

    async def discover(self, timeout: float) -> None:
        """Ask what the server speaks (``server/discover``), within timeout."""
        try:
            result = await self.request("server/discover", {}, timeout=timeout)
        except asyncio.TimeoutError:
            raise asyncio.TimeoutError(f"ipybox mcp did not answer server/discover within {timeout}s (connect_timeout)") from None
        except MCPError as e:
            raise MCPError(
                "server/discover",
                {"code": e.code, "message": f"{e}; this ipybox mcp does not speak MCP {PROTOCOL_VERSION}: use an ipybox binary of this package's version"},
            ) from e
        versions = (result or {}).get("supportedVersions") or []
        if PROTOCOL_VERSION not in versions:
            raise MCPError(
                "server/discover",
                {"code": -32602, "message": f"ipybox mcp speaks {versions}, not MCP {PROTOCOL_VERSION}: use an ipybox binary of this package's version"},
            )
        self.server_info = result

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
            # 2026-07-28 has no requests from the server (elicitation comes
            # as input-required results); refuse any.
            self._refuse(msg)
            return
        self._on_notification(msg)

    def _refuse(self, msg: dict[str, Any]) -> None:
        pass

    def _fail_pending(self, err: BaseException) -> None:
        for _, fut in list(self._pending.values()):
            if not fut.done():
                fut.set_exception(err)
        self._pending.clear()


class StdioClient(Client):
    """One ``ipybox mcp`` process and its JSON-RPC connection, one message
    per line."""

    def __init__(self, argv: list[str], *, env: dict[str, str] | None = None, on_notification: Callable[[dict[str, Any]], None]):
        super().__init__(on_notification)
        self._argv = argv
        self._env = env
        self._proc: asyncio.subprocess.Process | None = None
        self._stderr: collections.deque[str] = collections.deque(maxlen=_STDERR_LINES)
        self._tasks: list[asyncio.Task] = []
        self._exited: asyncio.Event | None = None
        self._exit_reason = ""

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
        """Start the process and ask what it speaks, within timeout seconds."""
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
        await self.discover(timeout)

    # --- sending -----------------------------------------------------------

    def _write(self, msg: dict[str, Any]) -> None:
        if self._proc is None or self._exited is None or self._exited.is_set():
            raise self._exit_error()
        data = json.dumps(msg, separators=(",", ":"), ensure_ascii=False).encode() + b"\n"
        stdin = self._proc.stdin
        try:
            # write() does not block: the transport buffers what the pipe
            # does not take. Drain (flow control) only when it holds much.
            stdin.write(data)
        except (ConnectionError, RuntimeError) as e:
            raise self._exit_error() from e
        if stdin.transport.get_write_buffer_size() > 1 << 20:
            asyncio.ensure_future(self._safe(stdin.drain()))

    def _send(self, rid: int, msg: dict[str, Any]) -> None:
        self._write(msg)

    async def notify(self, method: str, params: dict[str, Any]) -> None:
        self._write({"jsonrpc": "2.0", "method": method, "params": params})

    def cancel(self, rid: int, reason: str) -> None:
        try:
            self._write({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": rid, "reason": reason}})
        except ServerExited:
            pass

    def _refuse(self, msg: dict[str, Any]) -> None:
        try:
            self._write({"jsonrpc": "2.0", "id": msg["id"], "error": {"code": -32601, "message": f"method {msg.get('method')!r} not supported"}})
        except ServerExited:
            pass

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
            self._fail_pending(self._exit_error())
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


class HTTPClient(Client):
    """Requests to an ``ipybox mcp --http`` server, each a POST of its own
    (MCP 2026-07-28 over HTTP has no transport session). A request's answer
    is JSON, or an event stream of its notifications and then its
    response. Each request is read by a thread of its own, which hands the
    messages to the event loop in order."""

    def __init__(self, url: str, token: str | None, *, on_notification: Callable[[dict[str, Any]], None], timeout: float = 30):
        super().__init__(on_notification)
        u = urllib.parse.urlsplit(url)
        if u.scheme not in ("http", "https") or not u.hostname:
            raise ValueError(f"server_url {url!r}: want http://HOST:PORT/mcp or https://...")
        self._url = u
        self._path = (u.path or "/") + (f"?{u.query}" if u.query else "")
        self._token = token
        self._timeout = timeout  # to connect and send; reading waits for the cell
        self._loop: asyncio.AbstractEventLoop | None = None
        self._lock = threading.Lock()
        self._conns: dict[int, http.client.HTTPConnection] = {}
        self._threads: set[threading.Thread] = set()
        self._closed = False
        self.pid = None

    def stderr_tail(self) -> str:
        return ""

    def _exit_error(self) -> ServerExited:
        return ServerExited(f"ipybox mcp at {self._url.geturl()} cannot be reached")

    async def start(self, timeout: float) -> None:
        """Ask the server what it speaks, within timeout seconds."""
        self._loop = asyncio.get_running_loop()
        await self.discover(timeout)

    def _headers(self, msg: dict[str, Any]) -> dict[str, str]:
        h = {
            "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream",
            "Mcp-Protocol-Version": PROTOCOL_VERSION,
            # The method and the tool's name, for routers (SEP-2243).
            "Mcp-Method": msg["method"],
        }
        if msg["method"] == "tools/call":
            h["Mcp-Name"] = msg["params"]["name"]
        if self._token:
            h["Authorization"] = f"Bearer {self._token}"
        return h

    def _connection(self) -> http.client.HTTPConnection:
        u = self._url
        if u.scheme == "https":
            return http.client.HTTPSConnection(u.hostname, u.port, timeout=self._timeout)
        return http.client.HTTPConnection(u.hostname, u.port, timeout=self._timeout)

    def _send(self, rid: int, msg: dict[str, Any]) -> None:
        if self._closed or self._loop is None:
            raise self._exit_error()
        body = json.dumps(msg, separators=(",", ":"), ensure_ascii=False).encode()
        conn = self._connection()
        with self._lock:
            self._conns[rid] = conn
        t = threading.Thread(target=self._post, args=(rid, conn, body, self._headers(msg)), name=f"ipybox-mcp-{rid}", daemon=True)
        with self._lock:
            self._threads.add(t)
        t.start()

    def _post(self, rid: int, conn: http.client.HTTPConnection, body: bytes, headers: dict[str, str]) -> None:
        loop = self._loop
        assert loop is not None

        def hand(msg: dict[str, Any]) -> None:
            loop.call_soon_threadsafe(self._dispatch, msg)

        try:
            conn.request("POST", self._path, body, headers)
            if conn.sock is not None:
                conn.sock.settimeout(None)  # a cell may run for a day
            resp = conn.getresponse()
            ctype = (resp.getheader("Content-Type") or "").split(";")[0].strip()
            if resp.status >= 300:
                text = resp.read(1 << 20).decode(errors="replace")
                try:
                    msg = json.loads(text)
                    if isinstance(msg, dict) and "error" in msg:
                        msg["id"] = rid
                        hand(msg)
                        return
                except ValueError:
                    pass
                raise ConnectionError(f"ipybox mcp answered HTTP {resp.status}: {text.strip()[:500]}")
            if ctype == "text/event-stream":
                data: list[str] = []
                while True:
                    line = resp.readline()
                    if not line:
                        break
                    line = line.decode().rstrip("\r\n")
                    if line.startswith("data:"):
                        data.append(line[5:].removeprefix(" "))
                    elif line == "" and data:
                        msg = json.loads("\n".join(data))
                        data = []
                        if isinstance(msg, dict):
                            hand(msg)
                            if msg.get("id") == rid and "method" not in msg:
                                return
                raise ConnectionError("ipybox mcp ended the event stream without a response")
            msg = json.loads(resp.read())
            if isinstance(msg, dict):
                hand(msg)
        except BaseException as e:  # the loop's future gets it
            err = e if isinstance(e, ConnectionError) else ServerExited(f"ipybox mcp at {self._url.geturl()}: {e}")

            def fail(err: BaseException = err) -> None:
                entry = self._pending.pop(rid, None)
                if entry and not entry[1].done():
                    entry[1].set_exception(err)

            try:
                loop.call_soon_threadsafe(fail)
            except RuntimeError:  # the loop is closed
                pass
        finally:
            with self._lock:
                self._conns.pop(rid, None)
                self._threads.discard(threading.current_thread())
            conn.close()

    def _abort(self, rid: int) -> None:
        """End request rid's connection: the server ends the request (and
        its cell)."""
        with self._lock:
            conn = self._conns.get(rid)
        if conn is not None and conn.sock is not None:
            try:
                conn.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def cancel(self, rid: int, reason: str) -> None:
        self._abort(rid)

    def forget(self, rid: int) -> None:
        super().forget(rid)
        self._abort(rid)

    async def notify(self, method: str, params: dict[str, Any]) -> None:
        pass  # nothing ipybox mcp needs over HTTP

    async def close(self, grace: float = 10.0) -> None:
        """Stop every request and wait (bounded) for their threads."""
        self._closed = True
        with self._lock:
            rids = list(self._conns)
            threads = list(self._threads)
        for rid in rids:
            self._abort(rid)
        self._fail_pending(self._exit_error())
        for t in threads:
            await asyncio.get_running_loop().run_in_executor(None, t.join, 5)

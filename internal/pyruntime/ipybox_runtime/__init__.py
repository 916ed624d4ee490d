"""Kernel-side runtime of ipybox: calls MCP tools through the host's tool server.

Generated tool modules (``mcptools.<server>.<tool>``) call :func:`run_tool`
and :func:`run_tool_async`; the kernel's shell hooks call
:func:`approve_shell`. Every request goes to the tool server of this kernel's
executor, found through two environment variables the host sets:

``IPYBOX_TOOL_URL``
    ``unix:///abs/path/tool.sock`` or ``http://127.0.0.1:PORT``.
``IPYBOX_TOOL_TOKEN``
    The executor's bearer token.
``IPYBOX_TOOL_TIMEOUT`` (optional)
    Seconds to wait for one answer (default 900). The host bounds the
    approval and the call; this is only a safety net against a lost host.

The kernel never sends a command, a URL, headers or secrets: only a server
name, a tool name and the arguments, which the host treats as data. This
module uses the standard library only.
"""

import asyncio
import base64
import concurrent.futures
import functools
import http.client
import json
import os
import socket
import sys
import threading

__all__ = [
    "run_tool",
    "run_tool_async",
    "approve_shell",
    "traceparent",
    "ToolResult",
    "Image",
    "Audio",
    "Resource",
    "ToolRunnerError",
    "ToolError",
    "ApprovalRejectedError",
    "ApprovalTimeoutError",
    "ToolServerError",
    "ToolServerBusyError",
]

ENV_URL = "IPYBOX_TOOL_URL"
ENV_TOKEN = "IPYBOX_TOOL_TOKEN"
ENV_TIMEOUT = "IPYBOX_TOOL_TIMEOUT"
ENV_CERT_SHA256 = "IPYBOX_TOOL_CERT_SHA256"
DEFAULT_TIMEOUT = 900.0

# Async calls run in threads of their own pool, so that many concurrent calls
# (each may wait for a human approval) do not starve the loop's default
# executor.
_MAX_ASYNC_WORKERS = 32


# ---------------------------------------------------------------- exceptions


class ToolRunnerError(Exception):
    """Base class of every error raised by ipybox_runtime.

    ``kind`` is the tool server's error kind (for example ``"rejected"`` or
    ``"unauthorized"``), ``status`` the HTTP status or None when the server
    was not reached.
    """

    def __init__(self, message, kind=None, status=None):
        super().__init__(message)
        self.message = message
        self.kind = kind
        self.status = status


class ToolError(ToolRunnerError):
    """The tool failed; the message is the server's text.

    ``result`` is the full :class:`ToolResult` when the tool returned an error
    result (images or resources in it are not lost), else None.
    """

    def __init__(self, message, kind="tool_error", status=None, result=None):
        super().__init__(message, kind, status)
        self.result = result


class ApprovalRejectedError(ToolRunnerError):
    """The application rejected the tool call or shell command."""


class ApprovalTimeoutError(ToolRunnerError):
    """Nobody approved the tool call or shell command in time."""


class ToolServerError(ToolRunnerError):
    """The tool server could not be reached or refused the request.

    This covers transport problems, a missing or wrong token, unknown
    servers, bad requests, call timeouts and internal errors; ``kind`` tells
    them apart.
    """


class ToolServerBusyError(ToolServerError):
    """The tool server holds as many requests of this kernel as it may, and
    as many more wait in line (kind ``"busy"``, HTTP 429). Nothing ran: try
    again once some calls have finished, or pass large data through files.
    """


_KIND_TO_ERROR = {
    "busy": ToolServerBusyError,
    "tool_error": ToolError,
    "rejected": ApprovalRejectedError,
    "approval_timeout": ApprovalTimeoutError,
}


# ------------------------------------------------------------------ results


class _Media:
    """Binary content of a tool result: ``data`` bytes and a ``mime_type``."""

    def __init__(self, data, mime_type):
        self.data = data
        self.mime_type = mime_type

    def save(self, path):
        """Write the bytes to ``path`` and return the path."""
        with open(path, "wb") as f:
            f.write(self.data)
        return path

    def __repr__(self):
        return "<%s %s, %d bytes>" % (type(self).__name__, self.mime_type, len(self.data))


class Image(_Media):
    """An image returned by a tool.

    ``display(img)`` shows it in the cell (ipybox saves it like a plot);
    ``img.save(path)`` writes the bytes to a file.
    """

    def _repr_png_(self):
        return self.data if self.mime_type == "image/png" else None

    def _repr_jpeg_(self):
        return self.data if self.mime_type == "image/jpeg" else None

    def _repr_mimebundle_(self, include=None, exclude=None):
        bundle = {"text/plain": repr(self)}
        if self.mime_type == "image/svg+xml":
            bundle[self.mime_type] = self.data.decode("utf-8", "replace")
        elif self.mime_type.startswith("image/"):
            # Jupyter carries binary MIME data base64-encoded.
            bundle[self.mime_type] = base64.b64encode(self.data).decode("ascii")
        return bundle


class Audio(_Media):
    """Audio returned by a tool; ``save(path)`` writes the bytes."""


class Resource:
    """An embedded resource or a resource link returned by a tool.

    ``text`` is set for text resources, ``blob`` (bytes) for binary ones;
    a resource link has neither. ``raw`` is the content item as sent.
    """

    def __init__(self, item):
        self.raw = item
        res = item.get("resource") or {}
        self.is_link = item.get("type") == "resource_link"
        self.uri = res.get("uri") if not self.is_link else item.get("uri")
        self.mime_type = res.get("mimeType") if not self.is_link else item.get("mimeType")
        self.name = item.get("name")
        self.text = res.get("text")
        blob = res.get("blob")
        self.blob = _b64(blob) if blob is not None else None

    def save(self, path):
        """Write the resource's text or bytes to ``path`` and return the path."""
        if self.blob is not None:
            data = self.blob
        elif self.text is not None:
            data = self.text.encode("utf-8")
        else:
            raise ValueError("resource %r is a link without content; nothing to save" % self.uri)
        with open(path, "wb") as f:
            f.write(data)
        return path

    def __repr__(self):
        return "<Resource %s%s>" % (self.uri, " (link)" if self.is_link else "")


class ToolResult:
    """A tool result that is not just text: images, audio, resources, mixed.

    Nothing is dropped: ``content`` is the raw content list, ``structured``
    the structured content (or None); ``text`` joins the text items,
    ``images``, ``audio`` and ``resources`` hold the decoded other items.
    Displaying a ToolResult in a cell shows its text and its images.
    """

    def __init__(self, result):
        self.content = list(result.get("content") or [])
        self.structured = result.get("structuredContent")
        self.is_error = bool(result.get("isError"))
        texts, self.images, self.audio, self.resources = [], [], [], []
        for item in self.content:
            kind = item.get("type") if isinstance(item, dict) else None
            if kind == "text":
                texts.append(item.get("text", ""))
            elif kind == "image":
                self.images.append(Image(_b64(item.get("data", "")), item.get("mimeType", "")))
            elif kind == "audio":
                self.audio.append(Audio(_b64(item.get("data", "")), item.get("mimeType", "")))
            elif kind in ("resource", "resource_link"):
                self.resources.append(Resource(item))
        self.text = "\n".join(texts)

    def _ipython_display_(self):
        from IPython.display import display

        if self.text:
            print(self.text)
        for img in self.images:
            display(img)
        for other in self.audio + self.resources:
            print(repr(other))

    def __repr__(self):
        parts = []
        if self.text:
            parts.append("text=%d chars" % len(self.text))
        for name in ("images", "audio", "resources"):
            n = len(getattr(self, name))
            if n:
                parts.append("%s=%d" % (name, n))
        if self.structured is not None:
            parts.append("structured")
        return "<ToolResult %s>" % (", ".join(parts) or "empty")


def _b64(s):
    try:
        return base64.b64decode(s)
    except (ValueError, TypeError) as e:
        raise ToolServerError("tool result has invalid base64 data: %s" % e, kind="bad_result") from None


# ---------------------------------------------------------------- transport


class _UnixHTTPConnection(http.client.HTTPConnection):
    def __init__(self, path, timeout):
        # The Host header is "localhost", which the tool server expects on
        # its unix socket.
        super().__init__("localhost", timeout=timeout)
        self._unix_path = path

    def connect(self):
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.settimeout(self.timeout)
            sock.connect(self._unix_path)
        except BaseException:
            sock.close()
            raise
        self.sock = sock


class _PinnedHTTPSConnection(http.client.HTTPSConnection):
    """HTTPS to a tool server on another host, whose self-signed
    certificate must have the SHA-256 fingerprint the host pinned: the
    token goes to that server and no other."""

    def __init__(self, host, port, pin, timeout):
        import ssl

        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE  # the pin below is the check
        super().__init__(host, port, timeout=timeout, context=ctx)
        self._pin = pin.lower()

    def connect(self):
        import hashlib
        import hmac

        super().connect()
        der = self.sock.getpeercert(binary_form=True) or b""
        if not hmac.compare_digest(hashlib.sha256(der).hexdigest(), self._pin):
            self.close()
            raise ToolServerError(
                "the tool server at %s:%s presented a certificate whose fingerprint is not the one "
                "ipybox pinned (%s); the request was not sent" % (self.host, self.port, ENV_CERT_SHA256),
                kind="not_configured",
            )


def _config(timeout):
    url = os.environ.get(ENV_URL, "")
    token = os.environ.get(ENV_TOKEN, "")
    if not url or not token:
        missing = [n for n, v in ((ENV_URL, url), (ENV_TOKEN, token)) if not v]
        raise ToolServerError(
            "%s not set: this kernel has no tool server (ipybox sets these variables "
            "when it starts the kernel)" % " and ".join(missing),
            kind="not_configured",
        )
    if timeout is None:
        raw = os.environ.get(ENV_TIMEOUT, "")
        try:
            timeout = float(raw) if raw else DEFAULT_TIMEOUT
        except ValueError:
            raise ToolServerError(
                "%s=%r is not a number of seconds" % (ENV_TIMEOUT, raw), kind="not_configured"
            ) from None
    return url, token, timeout


def _connection(url, timeout):
    if url.startswith("unix://"):
        path = url[len("unix://"):]
        if not path.startswith("/"):
            raise ToolServerError("%s=%r: a unix URL needs an absolute path" % (ENV_URL, url), kind="not_configured")
        return _UnixHTTPConnection(path, timeout)
    if url.startswith("http://"):
        hostport = url[len("http://"):].rstrip("/")
        host, sep, port = hostport.rpartition(":")
        if not sep or host not in ("127.0.0.1", "localhost") or not port.isdigit():
            raise ToolServerError(
                "%s=%r: use http://127.0.0.1:PORT or unix:///path" % (ENV_URL, url), kind="not_configured"
            )
        return http.client.HTTPConnection(host, int(port), timeout=timeout)
    if url.startswith("https://"):
        hostport = url[len("https://"):].rstrip("/")
        host, sep, port = hostport.rpartition(":")
        pin = os.environ.get(ENV_CERT_SHA256, "")
        if not sep or not host or not port.isdigit() or len(pin) != 64:
            raise ToolServerError(
                "%s=%r: an https URL needs HOST:PORT and %s, the certificate's fingerprint"
                % (ENV_URL, url, ENV_CERT_SHA256),
                kind="not_configured",
            )
        return _PinnedHTTPSConnection(host.strip("[]"), int(port), pin, timeout)
    raise ToolServerError("%s=%r: use unix:///path or http://127.0.0.1:PORT" % (ENV_URL, url), kind="not_configured")


_local = threading.local()


def _pooled(url, timeout, fresh=False):
    """Returns this thread's keep-alive connection to url (and whether it is
    reused), creating it when needed. One connection per thread keeps
    concurrent calls from threads independent."""
    conn = getattr(_local, "conn", None)
    # A changed pin is a different server, as a changed URL is.
    key = (url, os.environ.get(ENV_CERT_SHA256, ""))
    if fresh or conn is None or getattr(_local, "key", None) != key:
        if conn is not None:
            conn.close()
        conn = _connection(url, timeout)
        _local.conn, _local.key = conn, key
        return conn, False
    conn.timeout = timeout
    if conn.sock is not None:
        conn.sock.settimeout(timeout)
    return conn, True


def _drop(conn):
    conn.close()
    if getattr(_local, "conn", None) is conn:
        _local.conn = None


def _post(path, payload, timeout=None):
    """POST payload as JSON to the tool server and return the decoded answer."""
    url, token, timeout = _config(timeout)
    # ensure_ascii=False plus strict UTF-8 encoding: a string that is not
    # valid Unicode (lone surrogates) fails here instead of being altered.
    try:
        body = json.dumps(payload, ensure_ascii=False, allow_nan=False).encode("utf-8")
    except UnicodeEncodeError as e:
        raise ValueError("cannot send a string that is not valid UTF-8: %s" % e) from None
    headers = {"Authorization": "Bearer " + token, "Content-Type": "application/json"}
    conn, reused = _pooled(url, timeout)
    try:
        try:
            try:
                conn.request("POST", path, body=body, headers=headers)
                resp = conn.getresponse()
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError):
                if not reused:
                    raise
                # The server closed the idle keep-alive connection before it
                # read the request: nothing ran, so send it once more.
                conn.close()
                conn, reused = _pooled(url, timeout, fresh=True)
                conn.request("POST", path, body=body, headers=headers)
                resp = conn.getresponse()
            status, data = resp.status, resp.read()
            if resp.will_close:
                _drop(conn)
        except socket.timeout:
            _drop(conn)
            raise ToolServerError(
                "no answer from the tool server within %g s (%s)" % (timeout, ENV_TIMEOUT), kind="timeout"
            ) from None
        except (OSError, http.client.HTTPException) as e:
            _drop(conn)
            raise ToolServerError("cannot reach the tool server at %s: %s" % (url, e), kind="unavailable") from None
    except BaseException:
        # KeyboardInterrupt mid-request leaves the connection in an unknown
        # state: never reuse it.
        _drop(conn)
        raise
    try:
        doc = json.loads(data.decode("utf-8"))
    except ValueError:
        doc = None
    if status == 200 and isinstance(doc, dict):
        return doc
    err = doc.get("error") if isinstance(doc, dict) else None
    if not isinstance(err, dict):
        snippet = data[:200].decode("utf-8", "replace")
        raise ToolServerError("tool server answered HTTP %d: %s" % (status, snippet), kind="http", status=status)
    kind = err.get("kind") or "unknown"
    message = err.get("message") or ("HTTP %d" % status)
    cls = _KIND_TO_ERROR.get(kind, ToolServerError)
    raise cls(message, kind=kind, status=status)


# ---------------------------------------------------------------- tool calls


def _dump(params):
    if params is None:
        return {}
    from ._models import dump_params

    return dump_params(params)


def _shape(result, result_type):
    if result.get("isError"):
        res = ToolResult(result)
        raise ToolError(res.text or "the tool reported an error without text", status=200, result=res)
    structured = result.get("structuredContent")
    if structured is not None and result_type is not None:
        from ._models import validate_result

        return validate_result(result_type, structured)
    content = result.get("content") or []
    if all(isinstance(c, dict) and c.get("type") == "text" for c in content):
        if content or structured is None:
            return "\n".join(c.get("text", "") for c in content)
        # No content at all, only structured data and no model to put it in.
        return structured
    return ToolResult(result)


def _sync_marker():
    """Flushes stdout and stderr, then publishes a marker on the kernel's
    iopub channel and returns its id (None outside a kernel).

    The marker travels behind the output on the same channel, so the host,
    which receives the id with the request, can hold an approval request
    until it has seen the output printed before the call.
    """
    if os.environ.get("IPYBOX_TOOL_SYNC") != "1":
        return None  # nothing on the host waits for output: skip the cost
    try:
        from IPython import get_ipython

        ip = get_ipython()
        kernel = getattr(ip, "kernel", None)
        if kernel is None:
            return None
        for stream in (sys.stdout, sys.stderr):
            # Text still in ipykernel's buffer must be handed to the IOPub
            # thread before the marker; text already handed over is ahead of
            # it in that thread's queue. flush() costs a round trip to the
            # IOPub thread, so skip it for an empty buffer.
            try:
                if _stream_pending(stream):
                    stream.flush()
            except Exception:
                pass
        marker = os.urandom(8).hex()
        kernel.session.send(
            kernel.iopub_socket,
            "ipybox_sync",
            {"id": marker},
            parent=kernel.get_parent("shell"),
            ident=b"ipybox_sync",
        )
        return marker
    except Exception:
        return None


def _stream_pending(stream):
    """Whether ipykernel's stream holds text not yet handed to the IOPub
    thread: one buffer in ipykernel 6 (_buffer), one per parent message in
    ipykernel 7 (_buffers). Unknown: True."""
    bufs = getattr(stream, "_buffers", None)
    if bufs is not None:
        with stream._buffer_lock:
            return any(b.tell() for b in stream._buffers.values())
    buf = getattr(stream, "_buffer", None)
    return buf is None or buf.tell() > 0


def run_tool(server, tool, params=None, result_type=None, *, timeout=None):
    """Call ``tool`` of the MCP server ``server`` and return its result.

    ``params`` is a pydantic model (v1 or v2, dumped by alias) or a dict.
    The call waits until the application approved it and the server
    answered. The result is ``result_type`` validated from the structured
    content when both exist, the joined text (str) for a text-only result,
    and otherwise a :class:`ToolResult`. ``timeout`` overrides
    ``IPYBOX_TOOL_TIMEOUT`` for this call.

    Raises ToolError (the tool failed), ApprovalRejectedError,
    ApprovalTimeoutError, or ToolServerError; all are ToolRunnerError.
    """
    payload = {"server": server, "tool": tool, "args": _dump(params)}
    marker = _sync_marker()
    if marker:
        payload["sync"] = marker
    result = _post("/v1/tools/call", payload, timeout)
    return _shape(result, result_type)


_executor = None
_executor_lock = threading.Lock()


def _get_executor():
    global _executor
    with _executor_lock:
        if _executor is None:
            _executor = concurrent.futures.ThreadPoolExecutor(
                max_workers=_MAX_ASYNC_WORKERS, thread_name_prefix="ipybox-tool"
            )
        return _executor


async def run_tool_async(server, tool, params=None, result_type=None, *, timeout=None):
    """Like :func:`run_tool`, without blocking the event loop.

    The request runs in a worker thread. Cancelling the awaiting task stops
    the wait, not the request: the host still finishes (or times out) the
    call.
    """
    loop = asyncio.get_running_loop()
    call = functools.partial(run_tool, server, tool, params, result_type, timeout=timeout)
    return await loop.run_in_executor(_get_executor(), call)


def approve_shell(command, *, timeout=None):
    """Ask the application to approve the shell command ``command``.

    ``command`` must be the exact text that will run (already expanded).
    Returns None when approved; raises ApprovalRejectedError or
    ApprovalTimeoutError otherwise (ToolServerError when the host cannot be
    asked).
    """
    if not isinstance(command, str) or not command:
        raise ValueError("approve_shell needs the command as a non-empty str, got %r" % (command,))
    payload = {"command": command}
    marker = _sync_marker()
    if marker:
        payload["sync"] = marker
    answer = _post("/v1/shell/approve", payload, timeout)
    # Fail closed: only an explicit approval lets the command run.
    if answer.get("approved") is not True:
        raise ApprovalRejectedError("shell command was not approved", kind="rejected", status=200)


def traceparent():
    """Return the W3C traceparent of the running cell's span, or None.

    When the host traces (ipybox.Options.TracerProvider, or ``ipybox mcp``
    with ``--otel-endpoint``), each cell runs under a span of its own, and
    this is its context: pass it on (an HTTP ``traceparent`` header, an MCP
    request's ``_meta``) so that what the code calls joins the trace. The
    tool calls the code makes through ``mcptools`` carry it already. None
    when the host does not trace, or outside a cell.
    """
    try:
        from IPython import get_ipython

        kernel = getattr(get_ipython(), "kernel", None)
        parent = kernel.get_parent("shell") if kernel is not None else None
    except Exception:
        return None
    meta = (parent or {}).get("metadata") or {}
    value = meta.get("traceparent") if isinstance(meta, dict) else None
    return value if isinstance(value, str) and value else None

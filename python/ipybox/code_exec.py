"""Upstream ipybox's ``CodeExecutor`` interface, backed by ``ipybox mcp``.

The executor starts ``ipybox mcp`` over stdio, or connects to one over
streamable HTTP (``server_url``), and speaks MCP 2026-07-28 to it: its
kernel is a session behind a handle (``create_session``); a cell is a call
of the ``execute_ipython_cell`` tool with that handle, its output arrives
as progress notifications, its approvals as an input-required result that
the executor answers by calling again, and the outcome in the result's
``_meta["ipybox/cell"]``. A program that keeps the handle comes back to
its kernel from another connection (``CodeExecutor(server_url=...,
session=handle)``).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import shutil
import tempfile
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, AsyncIterator, Callable

from ._mcp import Client, HTTPClient, MCPError, ServerExited, StdioClient

logger = logging.getLogger("ipybox")

__all__ = [
    "ApprovalRequest",
    "CodeExecutionChunk",
    "CodeExecutionError",
    "CodeExecutionResult",
    "CodeExecutor",
    "KernelDiedError",
    "find_binary",
]

# The longest timeout ipybox mcp accepts: "no timeout" is sent as this.
_MAX_TIMEOUT = 86400.0
# The most output text a result carries (the server's own maximum).
_MAX_OUTPUT_CHARS = 10_000_000
# How long a timed-out cell may take to be interrupted and reported before
# the client stops waiting (the server restarts a kernel that ignores the
# interrupt after 3s).
_TIMEOUT_GRACE = 30.0
# How long a cancelled cell may take to end before the next call.
_CANCEL_WAIT = 10.0
# ipybox mcp's --approval-timeout when approval_timeout is None.
_DEFAULT_APPROVAL_TIMEOUT = 300.0


def _texts(res: dict[str, Any]) -> str:
    """The text blocks of a tool result."""
    return "\n".join(c.get("text", "") for c in res.get("content") or [] if c.get("type") == "text")

_ENV_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class CodeExecutionError(Exception):
    """Raised when a cell fails: a Python exception (the message is
    ``"{ename}: {evalue}\\n{traceback}"``, as upstream's), a rejected or
    timed-out approval (which raise in the kernel), or a failure of ipybox.

    ``name``, ``value`` and ``traceback`` describe the Python exception
    (None otherwise); ``text`` is the output printed before it.
    """

    def __init__(
        self,
        message: str,
        *,
        name: str | None = None,
        value: str | None = None,
        traceback: str | None = None,
        text: str | None = None,
    ):
        super().__init__(message)
        self.name = name
        self.value = value
        self.traceback = traceback
        self.text = text


class KernelDiedError(CodeExecutionError):
    """The kernel died while the cell ran; its state is lost, and the next
    call runs in a fresh kernel."""


@dataclass
class CodeExecutionResult:
    """The result of a successful cell.

    Attributes:
        text: The output (stdout, stderr and the value of the last
            expression), or None when there was none.
        images: The image files the cell produced (plots), in order.
        warnings: ipybox's notes about this cell, such as "the kernel died
            since the last call and this cell ran in a fresh one".
    """

    text: str | None
    images: list[Path]
    warnings: list[str] = field(default_factory=list)


@dataclass
class CodeExecutionChunk:
    """A chunk of output, yielded by ``stream(code, chunks=True)`` as it is printed."""

    text: str


class ApprovalRequest:
    """A tool call, or a shell command, that the running cell wants to make.

    A tool call has ``server_name``, ``tool_name`` (the MCP tool's name) and
    ``tool_args``. A shell command (with ``approve_shell_cmds=True``) has
    ``server_name == "ipybox"``, ``tool_name`` ``"shell"`` (``!cmd``) or
    ``"shell_magic"`` (``%%bash`` and other script magics) and
    ``tool_args == {"cmd": command}``, as upstream's.

    The consumer must ``await accept()`` or ``await reject()``; a rejected
    call raises ``ApprovalRejectedError`` in the cell. Until then the call
    waits, and the cell's timeout is paused; the answers of one round (the
    requests that came together) go to ipybox when all are given, or when
    the approval timeout has passed.

    With an approval policy (ipybox's own; see docs/approvals.md):
        why: why it is asked: the ask rule of the policy that matched, or
            "no rule matched" (None without a policy).
        rule: the rule that remembering the answer writes, as narrow as
            the call (None when the call cannot be named by one rule).
        remember: the ways the answer can be remembered, as ("accept" or
            "reject", "session" or "always") pairs.
    ``accept(remember="session")``, ``accept(remember="always")`` and the
    same for ``reject`` remember the answer for this executor's session or,
    always, in the policy file; ``rule=`` widens it (it must still match
    the call; if it does not, the answer counts once).
    """

    def __init__(
        self,
        server_name: str,
        tool_name: str,
        tool_args: dict[str, Any],
        respond: Callable[..., Any],
        *,
        why: str | None = None,
        rule: str | None = None,
        answers: list[str] | None = None,
    ):
        self.server_name = server_name
        self.tool_name = tool_name
        self.tool_args = tool_args
        self.why = why
        self.rule = rule
        self._answers = list(answers or [])
        self._respond = respond
        self._decision: asyncio.Future[bool] = asyncio.get_running_loop().create_future()

    @property
    def remember(self) -> list[tuple[str, str]]:
        out = []
        for a in self._answers:
            verb, _, how = a.partition("-")
            if how:
                out.append(("accept" if verb == "allow" else "reject", how))
        return out

    def __str__(self) -> str:
        # Kernel code chose these strings: control characters and bidi
        # overrides are shown escaped (repr escapes the arguments).
        args = ", ".join(f"{_visible(str(k))}={v!r}" for k, v in self.tool_args.items())
        return f"{_visible(self.server_name)}.{_visible(self.tool_name)}({args})"

    def __repr__(self) -> str:
        return f"ApprovalRequest({self})"

    async def accept(self, *, remember: str = "once", rule: str | None = None) -> None:
        """Let the call run; remember="session" or "always" remembers it."""
        await self._decide(True, remember, rule)

    async def reject(self, *, remember: str = "once", rule: str | None = None) -> None:
        """Refuse the call: the cell gets ``ApprovalRejectedError``;
        remember="session" or "always" refuses calls like it too."""
        await self._decide(False, remember, rule)

    async def response(self) -> bool:
        """Wait for the decision and return it (True: accepted)."""
        return await self._decision

    def on_decision(self, callback: Callable[[bool], None]) -> None:
        """Call ``callback(accepted)`` once the decision is made."""

        def invoke(fut: asyncio.Future[bool]) -> None:
            if fut.cancelled():
                return
            try:
                callback(fut.result())
            except Exception:
                logger.exception("ipybox: error in an approval decision callback")

        self._decision.add_done_callback(invoke)

    async def _decide(self, accepted: bool, remember: str = "once", rule: str | None = None) -> None:
        if remember not in ("once", "session", "always"):
            raise ValueError(f"remember={remember!r}: want 'once', 'session' or 'always'")
        content = None
        if remember != "once":
            if ("accept" if accepted else "reject", remember) not in self.remember:
                raise ValueError(
                    f"this answer cannot be remembered for {remember!r}"
                    + (f" (an ask rule asks each time: {self.why})" if accepted and self.why and self.why.startswith("asked by") else "")
                    + f"; the ways it can: {self.remember or 'none (no approval policy, or a call no rule can name)'}"
                )
            content = {"answer": ("allow-" if accepted else "deny-") + remember}
            if rule is not None:
                content["rule"] = rule
        if self._decision.done():
            return  # only the first decision counts
        self._decision.set_result(accepted)
        if content is None:
            await self._respond(accepted)
        else:
            await self._respond(accepted, content)


def _visible(s: str) -> str:
    """s with every character that is not printable (controls, bidi
    overrides) written as a Python escape."""
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in s)


def find_binary(binary: str | os.PathLike[str] | None = None) -> str:
    """Return the ``ipybox`` binary to run: ``binary`` if given, else
    ``$IPYBOX_BIN``, else the one installed with this package (a wheel's
    ``ipybox`` script), else ``ipybox`` on PATH."""
    for source, candidate in (("binary argument", binary), ("IPYBOX_BIN", os.environ.get("IPYBOX_BIN"))):
        if candidate:
            path = os.fspath(candidate)
            resolved = shutil.which(path) if os.sep not in path else path
            if not resolved or not os.path.isfile(resolved) or not os.access(resolved, os.X_OK):
                raise FileNotFoundError(
                    f"ipybox binary {path!r} (from the {source}) is not an executable file; "
                    "build it with `go build -o bin/ipybox ./cmd/ipybox` and point at it"
                )
            return os.path.abspath(resolved)
    found = _bundled_binary() or shutil.which("ipybox")
    if found is None:
        raise FileNotFoundError(
            "the ipybox binary was not found: pass CodeExecutor(binary=...), set IPYBOX_BIN, "
            "or put ipybox on PATH (`pip install ipybox` installs both; "
            "or go install github.com/ipybox/ipybox/cmd/ipybox@latest)"
        )
    return found


def _bundled_binary() -> str | None:
    """Return the ``ipybox`` binary that was installed with this package, or
    None. A wheel carries it as a script (``<venv>/bin/ipybox``, or
    ``Scripts\\ipybox.exe`` on Windows); the distribution's RECORD says where
    it went, whatever the install scheme (venv, --user, --prefix, --target).
    It counts only if that distribution is the one this module was imported
    from: a checkout on sys.path does not run another version's binary.

    Only the folder this module was imported from is searched for the
    distribution, never the current folder (sys.path's '' or the cwd), where
    kernel code may have planted an ``ipybox-*.dist-info`` whose RECORD names
    a binary of its own; and the binary must lie under the distribution's
    own install prefix (RECORD entries are paths relative to it, or
    absolute)."""
    from importlib import metadata

    here = os.path.realpath(os.path.dirname(os.path.abspath(__file__)))
    site = os.path.dirname(here)
    if site == os.path.realpath(os.getcwd()):
        return None  # imported from the current folder: nothing there is trusted
    try:
        dists = list(metadata.distributions(name="ipybox", path=[site]))
    except Exception:  # unreadable metadata
        return None
    prefixes = _install_prefixes(site)
    for dist in dists:
        try:
            files = dist.files or []
        except Exception:
            continue
        mine, scripts = False, []
        for f in files:
            if f.parts[-2:] == ("ipybox", "code_exec.py"):
                mine = os.path.realpath(os.path.dirname(os.path.abspath(str(dist.locate_file(f))))) == here
            elif f.name in ("ipybox", "ipybox.exe") and f.parent.name in ("bin", "Scripts"):
                scripts.append(f)
        if not mine:
            continue
        for f in scripts:
            p = os.path.abspath(str(dist.locate_file(f)))
            if _under_any(os.path.realpath(p), prefixes) and os.path.isfile(p) and os.access(p, os.X_OK):
                return p
    return None


def _install_prefixes(site: str) -> list[str]:
    """Return the install prefixes a distribution in the folder ``site``
    may have put its scripts under: ``site`` itself (pip --target puts them
    in ``<target>/bin``), and the prefix of a scheme's layout:
    ``<prefix>/lib/pythonX.Y/site-packages`` (venv, --user, --prefix),
    Debian's ``<prefix>/lib/python3/dist-packages``, or Windows'
    ``<prefix>/Lib/site-packages``."""
    site = os.path.realpath(site)
    out = [site]
    parts = site.replace("\\", "/").split("/")
    if len(parts) >= 3 and parts[-1] in ("site-packages", "dist-packages"):
        if parts[-3].lower() == "lib" and parts[-2].startswith("python"):
            out.append(os.path.dirname(os.path.dirname(os.path.dirname(site))))
        elif parts[-2].lower() == "lib":
            out.append(os.path.dirname(os.path.dirname(site)))
    return out


def _under_any(path: str, prefixes: list[str]) -> bool:
    """Report whether path is at or below one of prefixes."""
    for pre in prefixes:
        if path == pre or path.startswith(pre.rstrip(os.sep) + os.sep):
            return True
    return False


_LOG_LEVELS = {"DEBUG": "debug", "INFO": "info", "WARNING": "warn", "WARN": "warn", "ERROR": "error", "CRITICAL": "error"}


def _dotenv_value(v: str) -> str:
    """Quote v for ipybox's .env reader (double quotes, with escapes)."""
    for a, b in (("\\", "\\\\"), ('"', '\\"'), ("$", "\\$"), ("\n", "\\n"), ("\r", "\\r"), ("\t", "\\t")):
        v = v.replace(a, b)
    return f'"{v}"'


# The flags CodeExecutor passes to ipybox mcp, by the argument that sets
# each: ipybox mcp's usage errors name its flags (and the private files
# that carry kernel_env and mcp_servers), which the caller never wrote.
_FLAG_ARGS = {
    "--python": "python",
    "--sandbox-config": "sandbox_config",
    "--approval-policy": "approval_policy",
    "--approval-log": "approval_log",
    "--approval-timeout": "approval_timeout",
    "--images-dir": "images_dir",
    "--start-timeout": "kernel_init_timeout",
    "--workspace": "working_dir",
}
_FILE_FLAG_ARGS = {"--mcp-config": "mcp_servers", "--kernel-env-file": "kernel_env"}


def _usage_error(tail: str) -> str:
    """ipybox mcp's usage error (exit status 2) in CodeExecutor's terms:
    its arguments' names for the flags, without the program's prefixes."""
    lines = []
    for line in tail.strip().splitlines():
        for prefix in ("ipybox mcp: ", "ipybox: "):
            while line.startswith(prefix):
                line = line[len(prefix):]
        for flag, arg in _FILE_FLAG_ARGS.items():
            line = re.sub(rf"(?<![\w-]){re.escape(flag)} \S+?:", f"{arg}:", line)
        for flag, arg in _FLAG_ARGS.items():
            line = re.sub(rf"(?<![\w-]){re.escape(flag)} (?=\S)", f"{arg}=", line)
            line = re.sub(rf"(?<![\w-]){re.escape(flag)}(?![\w-])", arg, line)
        lines.append(line)
    return "\n".join(lines)


def _own_python(workspace: Path) -> str | None:
    """The interpreter that runs this program, when the kernel should run
    on it: it can import ipykernel, $IPYBOX_PYTHON does not name another,
    and it does not lie in the workspace (a project's .venv), where kernel
    code could change it and ipybox refuses to run it on the host. So a
    venv that has ipykernel runs the kernel on its own ipykernel,
    activated or not (`venv/bin/python app.py`), as upstream's package,
    which depends on ipykernel, does. None: ipybox mcp finds one (PATH,
    then the system's)."""
    import importlib.util
    import sys

    if os.environ.get("IPYBOX_PYTHON") or not sys.executable:
        return None
    ws = os.path.realpath(workspace)
    for p in (os.path.abspath(sys.executable), os.path.realpath(sys.prefix)):
        if p == ws or p.startswith(ws.rstrip(os.sep) + os.sep):
            return None
    try:
        if importlib.util.find_spec("ipykernel") is None:
            return None
    except (ImportError, ValueError):
        return None
    return sys.executable


def _private_file(prefix: str, text: str) -> str:
    fd, path = tempfile.mkstemp(prefix=prefix)  # mode 0600
    with os.fdopen(fd, "w") as f:
        f.write(text)
    return path


# Servers written by generate_mcp_sources in this process, by the real path
# of their mcptools folder: an executor whose workspace holds that folder
# registers them at start, so that upstream's "generate, then execute"
# works unchanged.
_generated: dict[tuple[str, str], dict[str, Any]] = {}


class IgnoredArgumentWarning(UserWarning):
    """An argument that upstream's CodeExecutor (0.9) takes and this one
    ignores, because what it configured no longer exists."""


# What replaced each of upstream's arguments that CodeExecutor ignores.
_IGNORED_ARGS = {
    "tool_server_host": "kernel code reaches MCP tools through ipybox's own tool server, "
    "on a per-kernel unix socket with a token (a TLS port only for remote kernels), "
    "which ipybox sets up itself (docs/toolserver.md)",
    "kernel_gateway_host": "ipybox mcp starts and talks to its kernel itself; to run kernels "
    "on a Jupyter Server or Enterprise Gateway, start `ipybox mcp --http ADDR --gateway-url URL` "
    "and pass server_url= (docs/scale.md)",
}
_IGNORED_ARGS["tool_server_port"] = _IGNORED_ARGS["tool_server_host"]
_IGNORED_ARGS["kernel_gateway_port"] = _IGNORED_ARGS["kernel_gateway_host"]
_warned_ignored: set[str] = set()


def _warn_ignored(name: str) -> None:
    """Warns, once per process and argument, that name is ignored."""
    if name in _warned_ignored:
        return
    _warned_ignored.add(name)
    warnings.warn(
        f"CodeExecutor({name}=...) is ignored since ipybox 0.10 (upstream's 0.9 took it): {_IGNORED_ARGS[name]}",
        IgnoredArgumentWarning,
        stacklevel=3,
    )


class CodeExecutor:
    """A stateful IPython kernel with MCP tool calls that the application approves.

    An async context manager (or ``await start()`` / ``await stop()``). It
    runs ``ipybox mcp`` as a child process and speaks MCP to it over stdio,
    or, with ``server_url``, connects to an ``ipybox mcp --http`` server
    that runs already. Its kernel is a session of that server: ``session``
    is its handle.

    Keyword arguments, as upstream's:
        kernel_env: variables for the kernel; it inherits nothing else of
            this process's environment beyond PATH, HOME and LANG.
        working_dir: the workspace, the kernel's working directory (it holds
            mcptools/, images/ and .ipybox/). Default: the current directory.
        images_dir: where plots are saved. Default: <working_dir>/images.
        approval_timeout: seconds an approval may wait; then the call raises
            ApprovalTimeoutError in the cell. None: 5 minutes.
        connect_timeout: seconds for ipybox mcp to start and answer.
        kernel_init_timeout: seconds for the kernel to start (the first
            start in a workspace also creates its virtualenv, .ipybox/venv).
        sandbox: run the kernel in ipybox's bubblewrap sandbox.
        sandbox_config: a sandbox-runtime settings file (implies sandbox).
        log_level: ipybox's log level (its logs go to the "ipybox" logger
            at DEBUG, and into error messages).
        approve_tool_calls: ask about each MCP tool call (ApprovalRequest).
        approve_shell_cmds: ask about each shell command (!cmd, %%bash).
        require_shell_escape: guard subprocess and the like in the kernel,
            so that processes start through ! (a guard, not a boundary).
    Ours:
        approval_policy: the file of allow, ask and deny rules that decide
            tool calls and shell commands before an ApprovalRequest is
            made, and where answers remembered "always" go (None: ipybox's
            default, $XDG_CONFIG_HOME/ipybox/approvals.policy; "none": no
            rules). Keep it outside working_dir: ipybox refuses it there.
        approval_log: the audit log of every decision, JSON lines (None:
            ipybox's default, approvals.jsonl beside the policy; "none").
        binary: the ipybox binary (else $IPYBOX_BIN, else the one this
            package installed, else PATH).
        mcp_servers: {name: server_params} registered at start.
        python: the interpreter the kernel's virtualenv is made from
            (else $IPYBOX_PYTHON, else this program's own when it can
            import ipykernel, else the first python3 on PATH that can).
        server_url: an ``ipybox mcp --http`` server's URL (``http://HOST:
            PORT/mcp``) to use instead of starting ipybox mcp; the server's
            flags, not this executor's, then say how it runs kernels and
            asks about approvals (mcp_servers are registered with it).
        auth_token: the bearer token of server_url (else
            $IPYBOX_MCP_AUTH_TOKEN); it names the principal whose sessions
            these are.
        session: the handle of a session to come back to (from an earlier
            executor's ``session``), with its kernel's variables; None
            creates a new one.
        keep_session: leave the session on the server at stop(), so that a
            later executor can come back to it (server_url only: a stdio
            server ends with the executor). By default stop() ends it.
    Accepted and ignored (upstream's internal servers): tool_server_host,
    tool_server_port, kernel_gateway_host, kernel_gateway_port. Each warns
    once per process (IgnoredArgumentWarning), saying what replaced it.
    """

    def __init__(
        self,
        *,
        kernel_env: dict[str, str] | None = None,
        working_dir: str | os.PathLike[str] | None = None,
        images_dir: str | os.PathLike[str] | None = None,
        approval_timeout: float | None = None,
        connect_timeout: float = 30,
        kernel_init_timeout: float = 60,
        sandbox: bool = False,
        sandbox_config: str | os.PathLike[str] | None = None,
        log_level: str = "WARNING",
        approve_tool_calls: bool = True,
        approve_shell_cmds: bool = False,
        require_shell_escape: bool = False,
        approval_policy: str | os.PathLike[str] | None = None,
        approval_log: str | os.PathLike[str] | None = None,
        binary: str | os.PathLike[str] | None = None,
        mcp_servers: dict[str, dict[str, Any]] | None = None,
        python: str | os.PathLike[str] | None = None,
        server_url: str | None = None,
        auth_token: str | None = None,
        session: str | None = None,
        keep_session: bool = False,
        tool_server_host: str | None = None,
        tool_server_port: int | None = None,
        kernel_gateway_host: str | None = None,
        kernel_gateway_port: int | None = None,
    ):
        if log_level.upper() not in _LOG_LEVELS:
            raise ValueError(f"log_level {log_level!r}: want one of DEBUG, INFO, WARNING, ERROR, CRITICAL")
        for k in kernel_env or {}:
            if not _ENV_KEY.match(k):
                raise ValueError(f"kernel_env key {k!r} is not a variable name (letters, digits and _)")
        for name, params in (mcp_servers or {}).items():
            if not isinstance(params, dict):
                raise TypeError(f"mcp_servers[{name!r}] must be a dict such as {{'command': ..., 'args': [...]}}")
        for label, t in (("connect_timeout", connect_timeout), ("kernel_init_timeout", kernel_init_timeout)):
            if t is None or t <= 0:
                raise ValueError(f"{label} {t!r}: want a positive number of seconds")
        if approval_timeout is not None and approval_timeout <= 0:
            raise ValueError(f"approval_timeout {approval_timeout!r}: want a positive number of seconds, or None")
        for name, value in (
            ("tool_server_host", tool_server_host),
            ("tool_server_port", tool_server_port),
            ("kernel_gateway_host", kernel_gateway_host),
            ("kernel_gateway_port", kernel_gateway_port),
        ):
            if value is not None:
                _warn_ignored(name)
        self.kernel_env = dict(kernel_env or {})
        self.working_dir = Path(working_dir) if working_dir is not None else Path.cwd()
        self.images_dir = Path(images_dir) if images_dir is not None else None
        self.approval_timeout = approval_timeout
        self.connect_timeout = connect_timeout
        self.kernel_init_timeout = kernel_init_timeout
        self.sandbox = sandbox or sandbox_config is not None
        self.sandbox_config = Path(sandbox_config) if sandbox_config is not None else None
        self.log_level = log_level
        self.approve_tool_calls = approve_tool_calls
        self.approve_shell_cmds = approve_shell_cmds
        self.require_shell_escape = require_shell_escape
        self.approval_policy = approval_policy
        self.approval_log = approval_log
        self.binary = binary
        self.mcp_servers = dict(mcp_servers or {})
        self.python = python
        self.server_url = server_url
        self.auth_token = auth_token
        self.keep_session = keep_session
        if session is not None and (not isinstance(session, str) or not session):
            raise ValueError(f"session {session!r}: want the handle of an earlier executor's session, or None")
        self._session: str | None = session
        self._client: Client | None = None
        self._state = "new"  # new, started, closed
        self._lock: asyncio.Lock | None = None
        self._sink: Callable[[tuple[str, Any]], None] | None = None
        self._progress_token: str | None = None
        self._tokens = 0
        self._current_rid: int | None = None
        self._unregistered: dict[str, str] = {}  # of the last cell: server -> error
        # The start-up cell's warnings (a restored session's note), for the
        # first result.
        self._startup_warnings: list[str] = []

    # --- lifecycle -----------------------------------------------------------

    async def __aenter__(self) -> "CodeExecutor":
        await self.start()
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.stop()

    def _argv(self, bin_path: str, files: list[str]) -> list[str]:
        ws = self.working_dir.resolve()
        argv = [bin_path, "mcp", "--workspace", str(ws), "--log-level", _LOG_LEVELS[self.log_level.upper()]]
        argv += ["--start-timeout", f"{self.kernel_init_timeout}s"]
        # One kernel at a time: a warm spare would double the memory of a
        # single-user executor; reset starts a fresh kernel instead.
        argv += ["--pool", "0"]
        # This program is ipybox mcp's only client, and the servers it
        # registers are its own (as upstream's, they run on the host): the
        # rule that sandboxes or refuses servers registered by clients is
        # for clients that are not the application.
        argv += ["--allow-host-servers"]
        if self.images_dir is not None:
            argv += ["--images-dir", str(self.images_dir.resolve())]
        python = self.python if self.python is not None else _own_python(ws)
        if python is not None:
            argv += ["--python", os.fspath(python)]
        if self.sandbox_config is not None:
            argv += ["--sandbox-config", str(self.sandbox_config.resolve())]
        elif self.sandbox:
            argv += ["--sandbox"]
        else:
            argv += ["--no-sandbox"]
        if self.approve_tool_calls or self.approve_shell_cmds:
            argv += ["--approval", "elicit"]
            if not self.approve_tool_calls:
                argv += ["--allow-tool", "*.*"]
        else:
            argv += ["--approval", "auto"]
        if self.approval_timeout is not None:
            argv += ["--approval-timeout", f"{self.approval_timeout}s"]
        for flag, value in (("--approval-policy", self.approval_policy), ("--approval-log", self.approval_log)):
            if value is not None:
                v = os.fspath(value)
                argv += [flag, v if v == "none" else os.path.abspath(v)]
        if self.require_shell_escape:
            argv += ["--require-shell-escape"]
        if self.kernel_env:
            text = "".join(f"{k}={_dotenv_value(v)}\n" for k, v in self.kernel_env.items())
            files.append(_private_file("ipybox-kernel-env-", text))
            argv += ["--kernel-env-file", files[-1]]
        servers = dict(self.mcp_servers)
        mcptools = os.path.realpath(ws / "mcptools")
        for (root, name), params in _generated.items():
            if root == mcptools:
                servers.setdefault(name, params)
        if servers:
            files.append(_private_file("ipybox-mcp-config-", json.dumps({"mcpServers": servers})))
            argv += ["--mcp-config", files[-1]]
        return argv

    async def start(self) -> None:
        """Start ipybox mcp (or connect to server_url), make or resume the
        session, and wait for its kernel; raise if any cannot start."""
        if self._state != "new":
            raise RuntimeError(f"CodeExecutor is {self._state}; create a new one")
        self._state = "started"
        self._lock = asyncio.Lock()
        files: list[str] = []
        try:
            if self.server_url is not None:
                token = self.auth_token or os.environ.get("IPYBOX_MCP_AUTH_TOKEN") or None
                self._client = HTTPClient(self.server_url, token, on_notification=self._on_notification, timeout=self.connect_timeout)
                await self._client.start(self.connect_timeout)
            else:
                bin_path = find_binary(self.binary)
                if not self.working_dir.is_dir():
                    raise FileNotFoundError(f"working_dir {str(self.working_dir)!r} is not a directory; create it first")
                argv = self._argv(bin_path, files)
                self._client = StdioClient(argv, on_notification=self._on_notification)
                # Without a PYTHONSAFEPATH-style surprise: the server gets
                # this process's environment (it reads ${VAR} for server
                # configs from it); the kernel gets only kernel_env.
                await self._client.start(self.connect_timeout)
                # The server has read the files: remove them at once.
                for f in files:
                    os.unlink(f)
                files.clear()
            if self._session is None:
                res = await self._client.request("tools/call", {"name": "create_session", "arguments": {}}, timeout=self.connect_timeout)
                handle = ((res or {}).get("structuredContent") or {}).get("session")
                if (res or {}).get("isError") or not isinstance(handle, str):
                    raise CodeExecutionError("create_session: " + _texts(res or {}))
                self._session = handle
            if self.server_url is not None:
                for name, params in self.mcp_servers.items():
                    await self._tool_locked("register_mcp_server", {"server_name": name, "server_params": params}, timeout=self.connect_timeout + 60)
            # Wait for the kernel, so that a missing ipykernel, a sandbox
            # that cannot run, or an unknown session fails here, with the
            # cause.
            # And for the servers of mcp_servers, which the first cell
            # registers (over stdio).
            self._unregistered = {}
            startup = await self._call_cell("None", timeout=None, chunks=False, start_bound=self.kernel_init_timeout + 30)
            self._startup_warnings = list(startup.warnings)
            failed = {name: err for name, err in self._unregistered.items() if name in self.mcp_servers}
            if failed:
                raise RuntimeError("; ".join(f"mcp_servers[{name!r}] could not be registered: {err}" for name, err in sorted(failed.items())))
        except BaseException as e:
            tail = self._client.stderr_tail() if self._client else ""
            await self.stop()
            if isinstance(e, CodeExecutionError) and "unknown session" in str(e):
                raise RuntimeError(
                    f"session {self._session!r}: {e} (it was closed, it expired, or another token made it; "
                    "leave session unset to make a new one)"
                ) from e
            if isinstance(e, ServerExited) and self.server_url is None and "exited with status 2;" in str(e) and tail:
                # A usage error: an argument of this executor that only
                # ipybox mcp checks (a sandbox_config file, an approval
                # policy, mcp_servers' entries, the python).
                raise RuntimeError(f"CodeExecutor: ipybox mcp refused an argument: {_usage_error(tail)}") from e
            if isinstance(e, (ServerExited, MCPError, CodeExecutionError)):
                raise RuntimeError(f"ipybox mcp could not start a kernel: {e}" + (f"\n{tail}" if tail and tail not in str(e) else "")) from e
            raise
        finally:
            for f in files:
                try:
                    os.unlink(f)
                except OSError:
                    pass

    @property
    def session(self) -> str | None:
        """The handle of this executor's session: give it to
        ``CodeExecutor(server_url=..., session=...)`` to come back to this
        kernel later (with keep_session=True, or before stop())."""
        return self._session

    async def close_session(self) -> None:
        """End this executor's session on the server: its kernel stops, and
        the handle is unknown from then on. The executor is closed."""
        client = self._check()
        if self._session is not None:
            await self._tool("close_session", {"session": self._session}, timeout=self.connect_timeout)
            self.keep_session = True  # nothing left to end
        await self.stop()

    async def stop(self) -> None:
        """Stop the kernel and ipybox mcp (over HTTP, end the session unless
        keep_session). Idempotent; bounded in time."""
        if self._state == "closed":
            return
        self._state = "closed"
        client, self._client = self._client, None
        if client is None:
            return
        if isinstance(client, HTTPClient) and self._session is not None and not self.keep_session:
            try:
                await client.request("tools/call", {"name": "close_session", "arguments": {"session": self._session}}, timeout=10)
            except Exception as e:  # the server went away; its idle timeout ends the session
                logger.warning("ipybox: could not close session: %s", e)
        await client.close()

    def _check(self) -> Client:
        if self._state == "new":
            raise RuntimeError("CodeExecutor is not started: use `async with CodeExecutor() as executor:` or `await executor.start()`")
        if self._state == "closed" or self._client is None:
            raise RuntimeError("CodeExecutor is closed (stop() or the end of `async with`); create a new one")
        return self._client

    # --- messages from the server --------------------------------------------

    def _on_notification(self, msg: dict[str, Any]) -> None:
        sink = self._sink
        if sink is None:
            return
        method = msg.get("method")
        if method == "notifications/progress":
            p = msg.get("params") or {}
            text = p.get("message")
            stream = (p.get("_meta") or {}).get("ipybox/stream")
            if p.get("progressToken") == self._progress_token and stream in ("stdout", "stderr") and isinstance(text, str):
                sink(("chunk", text))
        elif method == "$/exited":
            sink(("exited", None))

    def _approval(self, params: dict[str, Any]) -> tuple[ApprovalRequest | None, bool]:
        """The ApprovalRequest of an input request's elicitation (None when
        it is not an approval of a cell of ours), and whether the executor
        accepts it without asking (a shell command without
        approve_shell_cmds)."""
        meta = (params.get("_meta") or {}).get("ipybox/approval")
        if not isinstance(meta, dict):
            return None, False
        answer: dict[str, Any] = {}

        async def decided(accepted: bool, content: dict[str, Any] | None = None) -> None:
            # The answers of a round go together, in the retry.
            answer["content"] = content

        why = meta.get("why") if isinstance(meta.get("why"), str) else None
        rule = meta.get("rule") if isinstance(meta.get("rule"), str) else None
        answers = [a for a in meta.get("answers") or [] if isinstance(a, str)]
        extra = {"why": why, "rule": rule, "answers": answers}
        if meta.get("kind") == "shell":
            cmd = str(meta.get("command", ""))
            req = ApprovalRequest("ipybox", "shell_magic" if cmd.startswith("%%") else "shell", {"cmd": cmd}, decided, **extra)
            # The server asks about every shell command when it asks at
            # all; without approve_shell_cmds they run, unless an ask rule
            # of the approval policy asks about this one.
            auto = not self.approve_shell_cmds and not meta.get("rule_asks")
        else:
            args = meta.get("args")
            req = ApprovalRequest(str(meta.get("server", "")), str(meta.get("tool", "")), args if isinstance(args, dict) else {}, decided, **extra)
            auto = False
        req._answer = answer
        return req, auto

    # --- cells -----------------------------------------------------------------

    async def stream(
        self, code: str, timeout: float | None = None, chunks: bool = False
    ) -> AsyncIterator[ApprovalRequest | CodeExecutionChunk | CodeExecutionResult]:
        """Run code; yield ApprovalRequests (answer each), CodeExecutionChunks
        (with chunks=True), then one CodeExecutionResult.

        Raises CodeExecutionError for a Python exception (and
        KernelDiedError when the kernel dies), asyncio.TimeoutError when the
        cell runs longer than timeout seconds, not counting the time spent
        waiting for approvals (the cell is interrupted; the kernel keeps its
        state). Leaving the loop early cancels the cell.
        """
        if timeout is not None and timeout <= 0:
            raise ValueError(f"timeout {timeout!r}: want a positive number of seconds, or None")
        async for item in self._stream(code, timeout, chunks):
            yield item

    async def execute(self, code: str, timeout: float | None = None) -> CodeExecutionResult:
        """Run code, accepting every approval request, and return the result."""
        result = None
        # To the end of the stream, so that it finishes here rather than in
        # a task of the garbage collector's.
        async for item in self.stream(code, timeout=timeout):
            if isinstance(item, ApprovalRequest):
                await item.accept()
            elif isinstance(item, CodeExecutionResult):
                result = item
        if result is None:
            raise RuntimeError("the cell ended without a result")
        return result

    async def _call_cell(self, code: str, timeout: float | None, chunks: bool, start_bound: float) -> CodeExecutionResult:
        result = None
        async for item in self._stream(code, timeout, chunks, start_bound=start_bound):
            if isinstance(item, ApprovalRequest):
                await item.reject()
            elif isinstance(item, CodeExecutionResult):
                result = item
        if result is None:
            raise RuntimeError("the cell ended without a result")
        return result

    async def _stream(self, code: str, timeout: float | None, chunks: bool, start_bound: float | None = None):
        client = self._check()
        if not isinstance(code, str):
            raise TypeError(f"code must be a str, not {type(code).__name__}")
        assert self._lock is not None
        async with self._lock:
            client = self._check()
            if not code.strip():
                yield CodeExecutionResult(text=None, images=[])
                return
            queue: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()
            self._sink = queue.put_nowait
            args = {
                "code": code,
                "timeout": timeout if timeout is not None else _MAX_TIMEOUT,
                "max_output_chars": _MAX_OUTPUT_CHARS,
                "session": self._session,
            }
            params: dict[str, Any] = {"name": "execute_ipython_cell", "arguments": args}
            if chunks:
                # Output comes as progress notifications for this token.
                self._tokens += 1
                self._progress_token = f"ipybox-cell-{self._tokens}"
                params["_meta"] = {"progressToken": self._progress_token}
            # A backstop over the server's own timeout: the budget pauses
            # while an approval waits, as the server's does.
            bound = start_bound if start_bound is not None else (timeout + _TIMEOUT_GRACE if timeout is not None else None)
            deadline = time.monotonic() + bound if bound is not None else None
            # An approval waits no longer than the server lets it.
            approval_wait = (self.approval_timeout or _DEFAULT_APPROVAL_TIMEOUT) + _TIMEOUT_GRACE
            open_approvals: list[ApprovalRequest] = []
            suspended: dict[str, Any] | None = None  # the last input-required result
            rid: int | None = None
            fut: asyncio.Future | None = None
            finished = False
            try:
                while True:  # one request per round of approvals
                    suspended = None
                    rid, fut = client.send_request("tools/call", params)
                    self._current_rid = rid
                    this = fut
                    fut.add_done_callback(lambda f: queue.put_nowait(("done", f)))
                    while True:
                        wait = None if deadline is None else max(0.0, deadline - time.monotonic())
                        try:
                            kind, item = await asyncio.wait_for(queue.get(), wait)
                        except asyncio.TimeoutError:
                            raise asyncio.TimeoutError(
                                f"ipybox mcp did not finish the cell within {bound:.0f}s" + (" (kernel_init_timeout)" if start_bound else "")
                            ) from None
                        if kind == "chunk":
                            if chunks:
                                yield CodeExecutionChunk(text=item)
                        elif kind == "exited":
                            raise client._exit_error()
                        elif kind == "done" and item is this:
                            break
                    res = self._response(fut)
                    if res.get("resultType") != "input_required":
                        finished = True
                        yield self._result(res)
                        return
                    suspended = res
                    answers: dict[str, Any] = {}
                    asked: list[tuple[str, ApprovalRequest]] = []
                    for key, ir in (res.get("inputRequests") or {}).items():
                        req, auto = self._approval((ir or {}).get("params") or {}) if (ir or {}).get("method") == "elicitation/create" else (None, False)
                        if req is None:
                            # Not an approval of a cell of ours: refuse
                            # rather than guess.
                            answers[key] = {"action": "decline"}
                        elif auto:
                            answers[key] = {"action": "accept", "content": {}}
                        else:
                            asked.append((key, req))
                            open_approvals.append(req)
                    paused_at = time.monotonic()
                    for _, req in asked:
                        yield req
                    if asked:
                        await asyncio.wait([r._decision for _, r in asked], timeout=approval_wait)
                    if deadline is not None:
                        deadline += time.monotonic() - paused_at
                    for key, req in asked:
                        if req._decision.done() and not req._decision.cancelled():
                            content = req._answer.get("content")
                            if content is not None:
                                # Remembered (policy): the form's answer.
                                answers[key] = {"action": "accept", "content": content}
                            else:
                                answers[key] = {"action": "accept", "content": {}} if req._decision.result() else {"action": "decline"}
                    params = {**params, "inputResponses": answers, "requestState": res.get("requestState")}
            finally:
                self._sink = None
                self._current_rid = None
                self._progress_token = None
                for r in open_approvals:
                    if not r._decision.done():
                        r._decision.set_result(False)
                if not finished and suspended is not None:
                    # The cell waits at a call: refuse what is open, so that
                    # it goes on at once, and let it end.
                    await self._abandon(client, params, suspended)
                elif not finished and fut is not None and not fut.done() and rid is not None:
                    await self._cancel(client, rid, fut)
                if fut is not None and fut.done() and not fut.cancelled():
                    fut.exception()  # retrieved: raised above, or superseded

    async def _abandon(self, client: Client, params: dict[str, Any], res: dict[str, Any]) -> None:
        """Answer a suspended cell's open approvals with refusals, and wait
        (bounded) for the cell to end, so that the next call starts clean."""
        answers = {key: {"action": "decline"} for key in (res.get("inputRequests") or {})}
        retry = {**params, "inputResponses": answers, "requestState": res.get("requestState")}
        retry.pop("_meta", None)
        try:
            rid, fut = client.send_request("tools/call", retry)
        except (ServerExited, ConnectionError):
            return
        try:
            await asyncio.wait_for(asyncio.shield(fut), _CANCEL_WAIT)
            # A cell that goes on after the refusal and asks again: leave it
            # to the approval timeout.
        except (asyncio.TimeoutError, Exception):
            client.cancel(rid, "the stream was closed by the application")
        finally:
            client.forget(rid)

    async def _cancel(self, client: Client, rid: int, fut: asyncio.Future) -> None:
        """Cancel request rid (the cell is interrupted) and wait, bounded,
        for the server to finish it, so that the next call starts clean."""
        try:
            client.cancel(rid, "the stream was closed by the application")
            await asyncio.wait_for(asyncio.shield(fut), _CANCEL_WAIT)
        except (asyncio.TimeoutError, Exception):
            pass
        finally:
            client.forget(rid)

    @staticmethod
    def _response(fut: asyncio.Future) -> dict[str, Any]:
        exc = fut.exception()
        if exc is not None:
            if isinstance(exc, MCPError):
                raise CodeExecutionError(f"ipybox mcp refused the cell: {exc}")
            raise exc
        return fut.result() or {}

    def _result(self, res: dict[str, Any]) -> CodeExecutionResult:
        meta = (res.get("_meta") or {}).get("ipybox/cell")
        if not isinstance(meta, dict):
            # A refusal before the cell ran (bad arguments, an unknown
            # session, a limit): the text says why.
            raise CodeExecutionError(_texts(res) or "ipybox mcp returned no cell outcome")
        text = meta.get("text") or None
        unregistered = meta.get("unregistered")
        if isinstance(unregistered, dict):
            self._unregistered = {str(k): str(v) for k, v in unregistered.items()}
        warnings = list(meta.get("warnings") or [])
        for w in warnings:
            logger.warning("%s", w)
        if self._startup_warnings:
            warnings = self._startup_warnings + warnings
            self._startup_warnings = []
        err = meta.get("error")
        if err:
            kind = err.get("kind")
            if kind == "python":
                name, value, tb = err.get("name", ""), err.get("value", ""), err.get("traceback", "")
                raise CodeExecutionError(f"{name}: {value}\n{tb}", name=name, value=value, traceback=tb, text=text)
            if kind == "timeout":
                raise asyncio.TimeoutError(err.get("message", "the cell timed out"))
            if kind == "interrupted":
                raise CodeExecutionError(err.get("message", "the cell was interrupted") + " (the interrupt tool)", text=text)
            if kind == "cancelled":
                raise CodeExecutionError("the cell was cancelled (cancel(), or its stream was closed); the kernel was interrupted and keeps its state", text=text)
            if kind == "kernel_died":
                raise KernelDiedError(f"{err.get('message')}; the kernel's state is lost, and the next call starts a fresh kernel", text=text)
            raise CodeExecutionError(err.get("message", "the cell failed"), text=text)
        return CodeExecutionResult(text=text, images=[Path(p) for p in meta.get("images") or []], warnings=warnings)

    async def cancel(self) -> None:
        """Interrupt the running cell, if any; its stream raises."""
        client = self._check()
        sink, rid = self._sink, self._current_rid
        if sink is not None and rid is not None:
            client.cancel(rid, "cancelled by the application")

    # --- other tools -------------------------------------------------------------

    async def _tool(self, name: str, arguments: dict[str, Any], timeout: float) -> dict[str, Any]:
        assert self._lock is not None
        self._check()
        async with self._lock:
            return await self._tool_locked(name, arguments, timeout)

    async def _tool_locked(self, name: str, arguments: dict[str, Any], timeout: float) -> dict[str, Any]:
        client = self._check()
        if name in ("reset", "register_mcp_server", "install_package"):
            arguments = {**arguments, "session": self._session}
        res = await client.request("tools/call", {"name": name, "arguments": arguments}, timeout=timeout)
        if res.get("isError"):
            raise CodeExecutionError(f"{name}: " + (_texts(res) or "failed"))
        return res

    async def fork(self, count: int = 1) -> list[str]:
        """Copy this executor's session: make count new sessions (1 to 8)
        whose kernels start with its variables, imports and definitions,
        and return their handles. The session runs on unchanged; files are
        not copied (the copies share the workspace). Use a handle with
        ``CodeExecutor(server_url=..., session=handle)``. A session running
        a cell cannot be copied until the cell ends."""
        if not isinstance(count, int) or isinstance(count, bool) or count < 1:
            raise ValueError(f"count {count!r}: want a whole number of copies, 1 or more")
        args: dict[str, Any] = {"count": count}
        if self._session is not None:
            args["session"] = self._session
        res = await self._tool("fork_session", args, timeout=self.kernel_init_timeout + 30)
        return list(((res.get("structuredContent") or {}).get("sessions")) or [])

    async def rewind(self, cells: int = 1) -> dict[str, int]:
        """Return the session's variables to what they were before its
        last cells cells (the server keeps only the last few boundaries:
        ``ipybox mcp --rewind-depth N``); files are not undone. The next
        result says what came back. Returns {"cells": ..., "left": ...}."""
        if not isinstance(cells, int) or isinstance(cells, bool) or cells < 1:
            raise ValueError(f"cells {cells!r}: want a whole number of cells, 1 or more")
        args: dict[str, Any] = {"cells": cells}
        if self._session is not None:
            args["session"] = self._session
        res = await self._tool("rewind_session", args, timeout=self.kernel_init_timeout + 30)
        return dict((res.get("structuredContent") or {}))

    async def reset(self) -> None:
        """Give the executor a fresh kernel: variables are gone; files,
        mcptools/, installed packages and registered servers stay."""
        await self._tool("reset", {}, timeout=self.kernel_init_timeout + 30)

    async def register_mcp_server(self, server_name: str, server_params: dict[str, Any]) -> list[str]:
        """Register an MCP server with this executor and write its modules
        to <working_dir>/mcptools/<server_name>/; return the tool module names.

        server_params is a config as in an mcpServers file: {"command": ...,
        "args": [...], "env": {...}} or {"url": ..., "headers": {...}};
        ${VAR} placeholders are filled from this process's environment.
        """
        if not isinstance(server_params, dict):
            raise TypeError("server_params must be a dict such as {'command': ..., 'args': [...]} or {'url': ...}")
        res = await self._tool(
            "register_mcp_server", {"server_name": server_name, "server_params": server_params}, timeout=self.connect_timeout + 60
        )
        mods = (res.get("_meta") or {}).get("ipybox/modules")
        if not isinstance(mods, list):
            raise CodeExecutionError("register_mcp_server: ipybox mcp returned no module list")
        return [str(m) for m in mods]

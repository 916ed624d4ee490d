"""ipybox's Python API: upstream ipybox's ``CodeExecutor`` interface, backed
by the Go engine (``ipybox mcp``, driven over stdio or streamable HTTP with
MCP's JSON-RPC, revision 2026-07-28).

    from ipybox import CodeExecutor

    async with CodeExecutor() as executor:
        result = await executor.execute("print(6 * 7)")
        print(result.text)  # 42

See docs/python.md.
"""

from ._version import __version__
from .code_exec import (
    ApprovalRequest,
    CodeExecutionChunk,
    CodeExecutionError,
    CodeExecutionResult,
    CodeExecutor,
    IgnoredArgumentWarning,
    KernelDiedError,
    find_binary,
)
from .mcp_apigen import generate_mcp_sources
from .sync import SyncCodeExecutor

__all__ = [
    "ApprovalRequest",
    "CodeExecutionChunk",
    "CodeExecutionError",
    "CodeExecutionResult",
    "CodeExecutor",
    "IgnoredArgumentWarning",
    "KernelDiedError",
    "SyncCodeExecutor",
    "__version__",
    "find_binary",
    "generate_mcp_sources",
]

"""``generate_mcp_sources``: upstream's tool-module generator, run by ``ipybox apigen``."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any

from . import code_exec
from .code_exec import find_binary

__all__ = ["generate_mcp_sources"]


async def generate_mcp_sources(
    server_name: str,
    server_params: dict[str, Any],
    root_dir: str | os.PathLike[str],
    *,
    binary: str | os.PathLike[str] | None = None,
    timeout: float = 60,
) -> list[str]:
    """Connect to an MCP server and write one typed module per tool to
    ``root_dir/server_name/`` (``Params``, ``Result``, ``run``,
    ``run_async``), replacing only that folder; return the module names.

    Calling the tools from a cell needs an executor that knows the server:
    a ``CodeExecutor`` whose ``working_dir`` holds ``root_dir`` (that is,
    ``root_dir`` is ``<working_dir>/mcptools``) registers, at its start, the
    servers generated there by this process, so that upstream's "generate,
    then execute" works as it did. ``executor.register_mcp_server`` does
    both steps at once. The config is passed on standard input, never on
    the command line; ``${VAR}`` placeholders are filled from the
    environment.
    """
    if not isinstance(server_params, dict):
        raise TypeError("server_params must be a dict such as {'command': ..., 'args': [...]} or {'url': ...}")
    bin_path = find_binary(binary)
    root = Path(root_dir).resolve()
    proc = await asyncio.create_subprocess_exec(
        bin_path, "apigen", "--name", server_name, "--server", "-", "--out", str(root), "--timeout", f"{timeout}s",
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(json.dumps(server_params).encode()), timeout + 10)
    except BaseException:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        raise
    if proc.returncode != 0:
        msg = err.decode(errors="replace").strip()
        if proc.returncode == 2:
            raise ValueError(msg)
        raise RuntimeError(msg or f"ipybox apigen exited with status {proc.returncode}")
    code_exec._generated[(os.path.realpath(root), server_name)] = dict(server_params)
    return out.decode().split()

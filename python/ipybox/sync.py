"""A synchronous wrapper of ``CodeExecutor`` for scripts."""

from __future__ import annotations

import asyncio
from typing import Any, Callable

from .code_exec import ApprovalRequest, CodeExecutionChunk, CodeExecutionResult, CodeExecutor

__all__ = ["SyncCodeExecutor"]


class SyncCodeExecutor:
    """``CodeExecutor`` for code without an event loop.

        with SyncCodeExecutor(working_dir="work") as ex:
            print(ex.execute("print(6 * 7)").text)

    It takes CodeExecutor's keyword arguments, runs a private event loop in
    the calling thread, and must not be used from inside a running loop
    (use CodeExecutor there). ``execute`` decides each approval request with
    ``approve(request) -> bool`` (None accepts every request, as
    CodeExecutor.execute does) and passes output chunks to
    ``on_chunk(text)`` as they are printed.
    """

    def __init__(self, **kwargs: Any):
        self._executor = CodeExecutor(**kwargs)
        self._loop: asyncio.AbstractEventLoop | None = None

    def _loop_or_raise(self) -> asyncio.AbstractEventLoop:
        if self._loop is None or self._loop.is_closed():
            raise RuntimeError("SyncCodeExecutor is not started (use `with SyncCodeExecutor() as ex:` or start()) or is closed")
        return self._loop

    def _run(self, make: Callable[[], Any]) -> Any:
        return self._loop_or_raise().run_until_complete(make())

    def start(self) -> "SyncCodeExecutor":
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            pass
        else:
            raise RuntimeError("SyncCodeExecutor cannot run inside an event loop; use `async with CodeExecutor()` there")
        self._loop = asyncio.new_event_loop()
        try:
            self._run(self._executor.start)
        except BaseException:
            self.close()
            raise
        return self

    def close(self) -> None:
        if self._loop is None or self._loop.is_closed():
            return
        try:
            self._loop.run_until_complete(self._executor.stop())
            self._loop.run_until_complete(self._loop.shutdown_asyncgens())
        finally:
            self._loop.close()

    def __enter__(self) -> "SyncCodeExecutor":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def execute(
        self,
        code: str,
        timeout: float | None = None,
        approve: Callable[[ApprovalRequest], bool] | None = None,
        on_chunk: Callable[[str], None] | None = None,
    ) -> CodeExecutionResult:
        async def run() -> CodeExecutionResult:
            result = None
            async for item in self._executor.stream(code, timeout=timeout, chunks=on_chunk is not None):
                if isinstance(item, ApprovalRequest):
                    if approve is None or approve(item):
                        await item.accept()
                    else:
                        await item.reject()
                elif isinstance(item, CodeExecutionChunk):
                    assert on_chunk is not None
                    on_chunk(item.text)
                elif isinstance(item, CodeExecutionResult):
                    result = item
            if result is None:
                raise RuntimeError("the cell ended without a result")
            return result

        return self._run(run)

    def reset(self) -> None:
        self._run(self._executor.reset)

    def fork(self, count: int = 1) -> list[str]:
        return self._run(lambda: self._executor.fork(count))

    def rewind(self, cells: int = 1) -> dict[str, int]:
        return self._run(lambda: self._executor.rewind(cells))

    def register_mcp_server(self, server_name: str, server_params: dict[str, Any]) -> list[str]:
        return self._run(lambda: self._executor.register_mcp_server(server_name, server_params))

    @property
    def session(self) -> str | None:
        """The handle of the executor's session (see CodeExecutor.session)."""
        return self._executor.session

    def close_session(self) -> None:
        """End the session on the server, and close the executor."""
        self._run(self._executor.close_session)

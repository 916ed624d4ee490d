"""Times `pass` cells through the Python API (python/ipybox), for
bench/python_test.go: python3 python_api.py BIN WORKSPACE N, one JSON line."""

import asyncio
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))

from ipybox import CodeExecutor  # noqa: E402


async def main(binary: str, workspace: str, n: int) -> None:
    async with CodeExecutor(binary=binary, working_dir=workspace) as ex:
        for _ in range(20):  # warm up, as the Go side does
            await ex.execute("pass")
        times = []
        for _ in range(n):
            t0 = time.perf_counter()
            await ex.execute("pass")
            times.append((time.perf_counter() - t0) * 1000)
    print(json.dumps({"p50_ms": statistics.median(times), "mean_ms": statistics.fmean(times), "n": n}))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3])))

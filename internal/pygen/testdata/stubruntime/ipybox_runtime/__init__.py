"""A stand-in for ipybox_runtime in pygen's tests.

run_tool serializes the parameters with the real _models.py (the test
copies it next to this file) and answers from ``fixtures`` instead of
calling the tool server; each call is recorded in ``calls``.
"""

import json

from ._models import dump_params, validate_result

calls = []
fixtures = {}


def run_tool(server, tool, params, result_type):
    args = dump_params(params)
    json.dumps(args)  # the arguments must be JSON, as on the wire
    calls.append({"server": server, "tool": tool, "args": args})
    if (server, tool) not in fixtures:
        return None
    data = fixtures[(server, tool)]
    if result_type is None:
        return data if isinstance(data, str) else json.dumps(data)
    return validate_result(result_type, data)


async def run_tool_async(server, tool, params, result_type):
    return run_tool(server, tool, params, result_type)

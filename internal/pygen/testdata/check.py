"""Checks generated tool modules under the current interpreter's pydantic.

Reads a JSON spec on stdin (see python_test.go) and prints a JSON report:
{"pydantic": version, "errors": [...]}. Warnings are errors, so that a
deprecation under pydantic 2 fails the test.
"""

import asyncio
import importlib
import json
import os
import sys
import traceback
import warnings

warnings.simplefilter("error")

import pydantic  # noqa: E402

import ipybox_runtime as rt  # noqa: E402

V2 = not pydantic.VERSION.startswith("1.")
errors = []


def fail(where, msg):
    errors.append("%s: %s" % (where, msg))


def fields(model):
    """Return {alias: field name} of a model class."""
    if V2:
        return {(n if f.alias is None else f.alias): n for n, f in model.model_fields.items()}
    return {f.alias: n for n, f in model.__fields__.items()}


def lookup(obj, path):
    for part in path.split(".") if path else []:
        obj = obj[int(part)] if part.isdigit() else getattr(obj, part)
    return obj


def plain(value):
    """Return value with models turned into dicts by field name, for compare."""
    if hasattr(value, "model_dump"):
        return value.model_dump()
    if hasattr(value, "dict") and hasattr(value, "__fields__"):
        return value.dict()
    return value


def main():
    spec = json.load(sys.stdin)
    modules = {}
    for name in spec["modules"]:
        try:
            modules[name] = importlib.import_module(name)
        except Exception:
            fail(name, "import: " + traceback.format_exc())
    for c in spec.get("params", []):
        where = "%s params %s" % (c["module"], json.dumps(c["kwargs"]))
        mod = modules.get(c["module"])
        if mod is None:
            fail(where, "module not imported")
            continue
        try:
            params = mod.Params(**c["kwargs"])
        except Exception as e:
            if not c.get("raises"):
                fail(where, "Params(...): %s" % e)
            continue
        if c.get("raises"):
            fail(where, "Params(...) accepted invalid input")
            continue
        rt.calls.clear()
        try:
            mod.run(params)
        except Exception:
            fail(where, "run: " + traceback.format_exc())
            continue
        got = rt.calls[-1]
        if got["server"] != mod.SERVER or got["tool"] != mod.TOOL:
            fail(where, "called %r/%r" % (got["server"], got["tool"]))
        if got["args"] != c["want"]:
            fail(where, "sent %s, want %s" % (json.dumps(got["args"]), json.dumps(c["want"])))
        names = fields(type(params))
        for alias, want in (c.get("defaults") or {}).items():
            have = plain(getattr(params, names[alias])) if alias in names else "<no field>"
            if have != want:
                fail(where, "default of %r is %r, want %r" % (alias, have, want))
    for c in spec.get("results", []):
        where = "%s result %s" % (c["module"], c["attr"])
        mod = modules.get(c["module"])
        if mod is None:
            fail(where, "module not imported")
            continue
        rt.fixtures[(mod.SERVER, mod.TOOL)] = c["data"]
        try:
            params = mod.Params(**c.get("kwargs", {}))
            if c.get("async"):
                result = asyncio.run(mod.run_async(params))
            else:
                result = mod.run(params)
            if c.get("type"):
                want_type = getattr(mod, c["type"]) if hasattr(mod, c["type"]) else __builtins__.__dict__[c["type"]]
                if not isinstance(result, want_type):
                    fail(where, "result is a %s, want %s" % (type(result).__name__, c["type"]))
            if c.get("by_alias"):
                got = rt.dump_params(lookup(result, c["attr"]))
            else:
                got = plain(lookup(result, c["attr"]))
            if got != c["want"]:
                fail(where, "got %r, want %r" % (got, c["want"]))
        except Exception:
            fail(where, traceback.format_exc())
    for c in spec.get("roundtrip", []):
        where = "%s roundtrip" % c["module"]
        mod = modules.get(c["module"])
        if mod is None:
            fail(where, "module not imported")
            continue
        if mod.TOOL != c["tool"]:
            fail(where, "TOOL is %r, want %r" % (mod.TOOL, c["tool"]))
        if c["description"].strip():
            for fn in (mod.run, mod.run_async):
                if fn.__doc__ != c["description"]:
                    fail(where, "%s.__doc__ is %r, want %r" % (fn.__name__, fn.__doc__, c["description"]))
        have = fields(mod.Params)
        for alias in c["properties"]:
            if alias not in have:
                fail(where, "no field with alias %r in %r" % (alias, sorted(have)))
    marker = spec.get("marker")
    if marker and os.path.exists(marker):
        fail("injection", "%s exists: generated code ran a payload" % marker)
    json.dump({"pydantic": pydantic.VERSION, "errors": errors}, sys.stdout)


main()

# Lifts importguard.py's guard (see there).
for _m in _b:
    if sys.modules.get(_m, 0) is None: del sys.modules[_m]
if sys.modules.get("IPython.terminal.embed") is _e: del sys.modules["IPython.terminal.embed"]
del _b, _m, _e

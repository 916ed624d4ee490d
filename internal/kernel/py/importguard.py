# Keeps modules that an agent's kernel has no use for from being imported
# while the kernel starts, which saves about a third of the start's CPU
# time: the debugger (debugpy) and jedi completion, and
# IPython.terminal.embed, which IPython's __init__ imports only to offer
# embed() and which pulls in prompt_toolkit and the terminal shell (about
# 60 ms). importguard_end.py lifts the guard once the kernel's modules are
# imported, so that user code can import all three; IPython.embed then
# imports the real embed on its first call.
import sys, types
_b = ("debugpy", "jedi")
for _m in _b: sys.modules.setdefault(_m, None)
_e = types.ModuleType("IPython.terminal.embed")
def _ipybox_embed(*a, **k):
    import importlib
    return importlib.import_module("IPython.terminal.embed").embed(*a, **k)
_e.embed = _ipybox_embed
sys.modules["IPython.terminal.embed"] = _e

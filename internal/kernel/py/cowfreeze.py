# Readies the fork server's heap, just before it serves, for the kernels
# that copy it page by page as they write to it (issue 38).
#
# It freezes what the fork server has built (imports, the shell
# template) out of the garbage collector's reach. A full collection
# writes into the header of every object it scans, and a kernel forked
# from here would then copy every page of the fork server's heap: 7.4 MB
# more private memory per idle sandboxed kernel after one gc.collect().
# A kernel's gc.get_objects() and gc.get_referrers() do not list frozen
# objects, and its collections do not scan them: what kernel code drops
# of them is freed when its count falls to zero, but a dropped cycle (a
# class, say) stays, and its finalizers and weakref callbacks do not run,
# until kernel code calls gc.unfreeze(). It is the kernel's own memory,
# shared until written.
#
# Before that, it gives sys.modules fresh copies of its names. Every
# kernel's start makes a set of them (IPython's _sys_modules_keys), which
# writes a reference count into each: over 500 strings, made as modules
# were imported, on as many pages, so that each kernel copied 0.44 MB for
# it. The copies are made one after another (a few pages), in the same
# order; a module is found by its name's value, not its identity.
def _ipybox_compact_module_names():
    import sys
    for name in list(sys.modules):
        sys.modules[(name + ".")[:-1]] = sys.modules.pop(name)
_ipybox_compact_module_names()
del _ipybox_compact_module_names
import gc
gc.freeze()

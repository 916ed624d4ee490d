# Freezes what the fork server has built (imports, the shell template) out
# of the garbage collector's reach, just before it serves. A full
# collection writes into the header of every object it scans, and a
# kernel forked from here would then copy every page of the fork server's
# heap: 7.4 MB more private memory per idle sandboxed kernel, measured
# after one gc.collect() (issue 38). A kernel's gc.get_objects() and
# gc.get_referrers() do not list frozen objects, and its collections do
# not scan them: what kernel code drops of them is freed when its count
# falls to zero, but a dropped cycle (a class, say) stays, and its
# finalizers and weakref callbacks do not run, until kernel code calls
# gc.unfreeze(). It is the kernel's own memory, shared until written.
import gc
gc.freeze()

# Freezes what the fork server has built (imports, the shell template) out
# of the garbage collector's reach, just before it serves. A full
# collection writes into the header of every object it scans, and a
# kernel forked from here would then copy every page of the fork server's
# heap: 7.4 MB more private memory per idle sandboxed kernel, measured
# after one gc.collect() (issue 38). Frozen objects are never collected
# (what is here is shared by every kernel, and lives as long as they do),
# and a kernel's gc.get_objects() and gc.get_referrers() do not list them.
import gc
gc.freeze()

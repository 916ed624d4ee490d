# Takes the working directory ("", which `python -c` puts first) off
# sys.path before anything is imported: the working directory is the
# workspace, which other sessions write, and a threading.py left there
# would otherwise run in this kernel as it starts. The kernel's init puts
# the workspace back, at the end of sys.path (see pyruntime.InitConfig).
import sys
if sys.path and sys.path[0] == "":
    del sys.path[0]

# ipykernel's launcher, as `python -m ipykernel_launcher` runs it, but
# first with the working directory off sys.path (nocwd.py), the lifeline
# watched (lifeline.WatchPython), and the imports a kernel has no use for
# kept out while it starts (importguard.py).
#ipybox:include nocwd.py
#ipybox:include confine.py
_ipybox_confine()
#ipybox:include lifeline
#ipybox:include importguard.py
sys.argv[0] = "ipykernel_launcher"
from ipykernel import kernelapp as _app
#ipybox:include importguard_end.py
#ipybox:include boundstreams.py
#ipybox:include idletrim.py
_app.launch_new_instance()

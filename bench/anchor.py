"""The anchor for ipybox's kernel benchmarks: Python's jupyter_client on the
same kernel build. Prints one JSON object.

  anchor.py roundtrip N   -- execute_interactive("pass") N times
  anchor.py start         -- KernelManager start + first execute
  anchor.py output MB     -- one cell printing MB megabytes; time and peak RSS
  anchor.py lifecycle N   -- N times: start, execute "1", restart_kernel, execute
                             "1", shutdown_kernel; the medians of restart and
                             shutdown, and of start-to-shutdown as a whole
  anchor.py burst N       -- N KernelManagers started at once, in threads, each
                             executing "1"; the time from the start to each
                             first result
  anchor.py gw-roundtrip URL N -- a Python websocket client (python3-websocket)
                             on a kernel of the Jupyter Server at URL: execute
                             "pass" N times over the channels websocket
  anchor.py gw-start URL  -- the same client: POST /api/kernels, open the
                             channels, kernel_info, execute "1"; then DELETE
The gateway modes read the server's token from $JUPYTER_GATEWAY_AUTH_TOKEN.
"""
import json
import resource
import sys
import threading
import time

from jupyter_client.manager import KernelManager


def start():
    km = KernelManager(kernel_name="python3")
    km.start_kernel()
    kc = km.client()
    kc.start_channels()
    kc.wait_for_ready(timeout=60)
    return km, kc


def burst(n):
    """Starts n kernels at once, one thread each, as a server would for n
    sessions, and returns each one's time from the common start to its
    first result, in milliseconds."""
    go = threading.Barrier(n + 1)
    ms = [None] * n
    errors = []
    kms = [None] * n

    def one(i):
        go.wait()
        try:
            km = KernelManager(kernel_name="python3")
            kms[i] = km
            km.start_kernel()
            kc = km.client()
            kc.start_channels()
            kc.wait_for_ready(timeout=120)
            kc.execute_interactive("1", timeout=120, output_hook=lambda m: None)
            ms[i] = (time.perf_counter() - t0) * 1000
            kc.stop_channels()
        except Exception as e:  # reported, not raised: the others go on
            errors.append(repr(e))

    threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    t0 = time.perf_counter()
    go.wait()
    for t in threads:
        t.join()
    for km in kms:
        if km is not None and km.has_kernel:
            km.shutdown_kernel(now=True)
    done = sorted(m for m in ms if m is not None)
    return {"ms": done, "errors": errors}


def lifecycle(n):
    restart, shutdown, whole = [], [], []
    for _ in range(n):
        t_start = time.perf_counter()
        km, kc = start()
        kc.execute_interactive("1", timeout=60, output_hook=lambda m: None)
        t0 = time.perf_counter()
        km.restart_kernel()
        kc.wait_for_ready(timeout=60)
        restart.append((time.perf_counter() - t0) * 1000)
        kc.execute_interactive("1", timeout=60, output_hook=lambda m: None)
        kc.stop_channels()
        t0 = time.perf_counter()
        km.shutdown_kernel()
        t1 = time.perf_counter()
        shutdown.append((t1 - t0) * 1000)
        whole.append((t1 - t_start) * 1000)
    med = lambda xs: sorted(xs)[len(xs) // 2]
    return {"restart_ms": med(restart), "shutdown_ms": med(shutdown), "shutdown_max_ms": max(shutdown), "whole_ms": med(whole)}


class GatewayKernel:
    """A kernel of a Jupyter Server driven the way a thin Python client
    would: urllib for REST, websocket-client for the channels (legacy JSON
    frames; websocket-client sets TCP_NODELAY)."""

    def __init__(self, url):
        import os
        import urllib.request
        import uuid

        import websocket

        self.url = url.rstrip("/")
        self.token = os.environ["JUPYTER_GATEWAY_AUTH_TOKEN"]
        self.urllib = urllib.request
        self.session = uuid.uuid4().hex
        self.id = self.rest("POST", "/api/kernels", {"name": "python3"})["id"]
        ws_url = "ws" + self.url[len("http"):] + "/api/kernels/" + self.id + "/channels?session_id=" + self.session
        self.ws = websocket.create_connection(ws_url, header=["Authorization: token " + self.token])
        self.uuid = uuid

    def rest(self, method, path, body=None):
        data = json.dumps(body).encode() if body is not None else None
        req = self.urllib.Request(self.url + path, data=data, method=method,
                                  headers={"Authorization": "token " + self.token, "Content-Type": "application/json"})
        with self.urllib.urlopen(req, timeout=60) as r:
            raw = r.read()
        return json.loads(raw) if raw else None

    def request(self, msg_type, content):
        """Sends a shell request; returns when its reply and the idle
        status for it have arrived."""
        mid = self.uuid.uuid4().hex
        self.ws.send(json.dumps({
            "channel": "shell",
            "header": {"msg_id": mid, "session": self.session, "username": "anchor", "date": "",
                       "msg_type": msg_type, "version": "5.3"},
            "parent_header": {}, "metadata": {}, "content": content, "buffers": [],
        }))
        reply = idle = False
        while not (reply and idle):
            m = json.loads(self.ws.recv())
            if m.get("parent_header", {}).get("msg_id") != mid:
                continue
            if m["channel"] == "shell":
                reply = True
            elif m["msg_type"] == "status" and m["content"]["execution_state"] == "idle":
                idle = True

    def execute(self, code):
        self.request("execute_request", {"code": code, "silent": False, "store_history": True,
                                         "user_expressions": {}, "allow_stdin": False, "stop_on_error": False})

    def close(self):
        self.ws.close()
        self.rest("DELETE", "/api/kernels/" + self.id)


def main():
    mode = sys.argv[1]
    if mode == "gw-roundtrip":
        k = GatewayKernel(sys.argv[2])
        try:
            k.request("kernel_info_request", {})
            n = int(sys.argv[3])
            for _ in range(20):  # warm up
                k.execute("pass")
            times = []
            for _ in range(n):
                t0 = time.perf_counter()
                k.execute("pass")
                times.append(time.perf_counter() - t0)
            times.sort()
            print(json.dumps({"p50_ms": times[len(times) // 2] * 1000, "mean_ms": sum(times) / n * 1000}))
        finally:
            k.close()
        return
    if mode == "gw-start":
        t0 = time.perf_counter()
        k = GatewayKernel(sys.argv[2])
        k.request("kernel_info_request", {})
        k.execute("1")
        ms = (time.perf_counter() - t0) * 1000
        k.close()
        print(json.dumps({"ms": ms}))
        return
    if mode == "gw-contents":
        # The same file up and down through the Jupyter contents API, as a
        # thin client would (base64 in one JSON body each way).
        import base64
        import os
        import urllib.request

        url, mb = sys.argv[2].rstrip("/"), int(sys.argv[3])
        token = os.environ["JUPYTER_GATEWAY_AUTH_TOKEN"]
        data = os.urandom(mb << 20)

        def rest(method, path, body=None):
            req = urllib.request.Request(url + path, data=json.dumps(body).encode() if body is not None else None, method=method,
                                         headers={"Authorization": "token " + token, "Content-Type": "application/json"})
            with urllib.request.urlopen(req, timeout=300) as r:
                return json.loads(r.read())

        t0 = time.perf_counter()
        rest("PUT", "/api/contents/anchor.bin", {"type": "file", "format": "base64", "content": base64.b64encode(data).decode()})
        up = time.perf_counter() - t0
        t0 = time.perf_counter()
        got = base64.b64decode(rest("GET", "/api/contents/anchor.bin?content=1&format=base64&type=file")["content"])
        down = time.perf_counter() - t0
        assert got == data
        print(json.dumps({"up_ms": up * 1000, "down_ms": down * 1000}))
        return
    if mode == "lifecycle":
        print(json.dumps(lifecycle(int(sys.argv[2]))))
        return
    if mode == "burst":
        print(json.dumps(burst(int(sys.argv[2]))))
        return
    if mode == "start":
        t0 = time.perf_counter()
        km, kc = start()
        kc.execute_interactive("1", timeout=60, output_hook=lambda m: None)
        ms = (time.perf_counter() - t0) * 1000
        kc.stop_channels()
        km.shutdown_kernel(now=True)
        print(json.dumps({"ms": ms}))
        return
    km, kc = start()
    try:
        if mode == "roundtrip":
            n = int(sys.argv[2])
            for _ in range(20):  # warm up
                kc.execute_interactive("pass", timeout=60, output_hook=lambda m: None)
            times = []
            for _ in range(n):
                t0 = time.perf_counter()
                kc.execute_interactive("pass", timeout=60, output_hook=lambda m: None)
                times.append(time.perf_counter() - t0)
            times.sort()
            print(json.dumps({"p50_ms": times[len(times) // 2] * 1000, "mean_ms": sum(times) / n * 1000}))
        elif mode == "output":
            mb = int(sys.argv[2])
            code = f"import sys\nline = 'x' * 99 + '\\n'\nfor _ in range({mb} * 10000):\n    sys.stdout.write(line)"
            chunks = []

            def hook(msg):
                if msg["msg_type"] == "stream":
                    chunks.append(msg["content"]["text"])

            t0 = time.perf_counter()
            kc.execute_interactive(code, timeout=600, output_hook=hook)
            ms = (time.perf_counter() - t0) * 1000
            out = "".join(chunks)
            print(json.dumps({
                "ms": ms,
                "bytes": len(out),
                "exact": out == ("x" * 99 + "\n") * (mb * 10000),
                "rss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
            }))
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)


if __name__ == "__main__":
    main()

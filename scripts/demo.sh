#!/usr/bin/env bash
# Sets up what it runs (scripts/setup.sh --demo), builds ipybox, and runs a demo of its main job: code
# actions in a stateful kernel (state across cells, shell commands, a plot),
# MCP tools called from Python with approval, and the sandbox.
set -euo pipefail
# go.mod names Go 1.27.3: the go command fetches that toolchain from the
# module proxy once (a machine's own Go ignores go.mod's toolchain line).
export GOTOOLCHAIN=go1.27.3
cd "$(dirname "$0")/.."
start=$SECONDS
progress() { printf 'demo: %s (%d s)\n' "$*" $((SECONDS - start)) >&2; }
command -v go >/dev/null || { progress "Go is missing: install Go 1.26 or newer (https://go.dev/dl; the scripts then fetch Go 1.27.3 through GOTOOLCHAIN)"; exit 1; }
# The build and the set-up at once: a cold build keeps the two cores busy
# for minutes, while apt mostly waits on the network and the disk. The
# build makes bin/ipybox and bin/everything, the MCP server of section 2:
# the Go MCP SDK's example server, from the module ipybox already requires
# (no node, no npm). Only what the demo runs: no test tools, no Docker
# image (scripts/test.sh builds it, as scripts/image.sh does on its own).
mkdir -p bin
progress "building bin/ipybox and bin/everything while setting up"
scripts/gobuild.sh demo -o bin/ ./cmd/ipybox github.com/modelcontextprotocol/go-sdk/examples/server/everything &
build=$!
trap 'kill "$build" 2>/dev/null || true' EXIT
progress "setting up (scripts/setup.sh --demo)"
scripts/setup.sh --demo
progress "set up; waiting for the build"
wait "$build"
progress "built bin/ipybox and bin/everything"
# The kernel runs on the venv that set-up made (PyPI's ipykernel 7 stack).
IPYBOX_PYTHON=$(scripts/pyvenv.sh pystack)/bin/python
export IPYBOX_PYTHON
ws=$(mktemp -d)
trap 'rm -rf "$ws"' EXIT   # the build is over

echo "== 1. A stateful kernel: state across cells, a shell command, a plot ($ws)"
bin/ipybox exec --workspace "$ws" \
  -c 'import math
data = [math.sin(i / 5) for i in range(50)]
print(f"computed {len(data)} points")' \
  -c 'files = !ls / | head -3
print("a shell command from Python:", files)' \
  -c 'import matplotlib.pyplot as plt
plt.plot(data)      # state from the first cell
plt.title("sin")
plt.show()' \
  -c 'max(data)'

echo
echo "== 2. MCP tools as typed Python functions (the Go MCP SDK's example server), approved by the host"
cat > "$ws/mcp.json" <<JSON
{"mcpServers": {"everything": {"command": "$PWD/bin/everything"}}}
JSON
bin/ipybox exec --workspace "$ws" --mcp-config "$ws/mcp.json" --json -c '
from mcptools.everything import greet, greet__structured_
print(greet.run(greet.Params(name="ipybox")))
reply = greet__structured_.run(greet__structured_.Params(name="a typed result"))
print(type(reply).__name__, "->", reply.message)' |
  while IFS= read -r event; do
    case "$event" in
      *'"type":"approval"'*) echo "  approval asked and given (--approval auto): $event" ;;
      *'"type":"output"'*) echo "  output: $event" ;;
    esac
  done

echo
echo "== 3. The same kernel in a bubblewrap sandbox: the workspace is writable, the host is not"
if bin/ipybox doctor | grep -q "^ok .*sandbox"; then
  bin/ipybox exec --sandbox --workspace "$ws" -c '
import os, socket
open("made-in-the-sandbox.txt", "w").write("hello")
attempts = {
    "read /etc/shadow": lambda: open("/etc/shadow").read(),
    "list /home": lambda: os.listdir("/home"),
    "connect to 1.1.1.1:443": lambda: socket.create_connection(("1.1.1.1", 443), timeout=2),
}
for what, attempt in attempts.items():
    try:
        attempt(); print("allowed:", what)
    except OSError as e:
        print("blocked:", what, "-", type(e).__name__)'
  ls "$ws/made-in-the-sandbox.txt"
else
  echo "  (skipped: bin/ipybox doctor says the sandbox cannot run on this host)"
fi
echo
progress "done"

#!/usr/bin/env bash
# Sets up the machine, builds ipybox, and runs a demo of its main job: code
# actions in a stateful kernel (state across cells, shell commands, a plot).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
mkdir -p bin
go build -o bin/ipybox ./cmd/ipybox
ws=$(mktemp -d)
echo "== workspace: $ws"
bin/ipybox exec --workspace "$ws" \
  -c 'import math
data = [math.sin(i / 5) for i in range(50)]
print(f"computed {len(data)} points")' \
  -c 'files = !ls /usr/lib/python3/dist-packages | head -3
print("a shell command from Python:", files)' \
  -c 'import matplotlib.pyplot as plt
plt.plot(data)      # state from the first cell
plt.title("sin")
plt.show()' \
  -c 'max(data)'
echo "== images saved:"; ls "$ws/images"

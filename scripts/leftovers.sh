#!/usr/bin/env bash
# Lists the processes that ipybox (or its tests) started and that are
# still alive: sandboxes (bwrap and the sandbox's init), kernels, fork
# servers, the test MCP servers, and kernel containers.
#   scripts/leftovers.sh snapshot FILE   record what runs now
#   scripts/leftovers.sh check FILE      fail if anything not in FILE is
#                                        left (after a grace period)
set -euo pipefail

list() {
  local pid cmd
  for d in /proc/[0-9]*; do
    pid=${d#/proc/}
    [ "$pid" = "$$" ] && continue
    { cmd=$(tr '\0' ' ' <"$d/cmdline"); } 2>/dev/null || continue
    case "$cmd" in
      *__sandbox-init*|bwrap\ *|*/bwrap\ *|*ipykernel_launcher*|*"# ipybox zygote"*|*ipybox-mcptest*|*/testmcp*)
        printf '%s %s\n' "$pid" "$(printf '%s' "$cmd" | cut -c1-160)" ;;
    esac
  done
  if command -v docker >/dev/null && docker info >/dev/null 2>&1; then
    docker ps -q --filter label=ai.ipybox.kernel | sed 's/^/container /'
  fi
}

case "${1:-}" in
  snapshot) list | awk '{print $1}' >"$2" ;;
  check)
    for _ in $(seq 1 50); do  # up to 10 s for processes that are ending
      left=$(list | awk 'NR==FNR { seen[$1] = 1; next } !seen[$1]' "$2" - || true)
      [ -z "$left" ] && exit 0
      sleep 0.2
    done
    echo "leftovers: processes that ipybox started are still running:" >&2
    echo "$left" >&2
    exit 1 ;;
  *) echo "usage: $0 snapshot|check FILE" >&2; exit 2 ;;
esac

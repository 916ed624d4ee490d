#!/usr/bin/env bash
# Runs `go build -v ARGS...` and turns its package list into progress
# lines, so that a cold build (minutes on two cores) is never silent:
#
#   go build: demo: 120 of 502 packages compiled (45 s)
#
#   scripts/gobuild.sh LABEL [go build flags] PACKAGES...
#
# The flags that take a value as the next word are -o, -ldflags, -gcflags,
# -tags and -p; any other flag is one word. The total is `go list -deps` of
# the packages (for this GOOS/GOARCH), which is also where the first run
# fetches Go 1.27.3 and the modules (the go command says so itself).
# Errors and the go command's own messages pass through unchanged.
set -euo pipefail
# go.mod names Go 1.27.3: the go command fetches that toolchain from the
# module proxy once (a machine's own Go ignores go.mod's toolchain line).
export GOTOOLCHAIN=go1.27.3
cd "$(dirname "$0")/.."

label=${1:?usage: scripts/gobuild.sh LABEL [go build flags] PACKAGES...}
shift
start=$SECONDS
say() { printf 'go build: %s: %s (%d s)\n' "$label" "$*" $((SECONDS - start)) >&2; }

pkgs=()
args=("$@")
for ((i = 0; i < ${#args[@]}; i++)); do
  case "${args[i]}" in
    -o | -ldflags | -gcflags | -tags | -p) i=$((i + 1)) ;;
    -*) ;;
    *) pkgs+=("${args[i]}") ;;
  esac
done
((${#pkgs[@]})) || { say "no package to build in: $*"; exit 2; }

say "listing the packages of ${pkgs[*]} (the first run fetches Go 1.27.3 and the modules)"
total=$(go list -deps "${pkgs[@]}" | wc -l)
say "compiling (up to $total packages; cached ones are skipped)"

fifo=$(mktemp -u)
mkfifo "$fifo"
go build -v "$@" 2>"$fifo" &
gopid=$!
trap 'kill "$gopid" 2>/dev/null || true; rm -f "$fifo"' EXIT
trap 'exit 143' TERM INT
# -v names each package as it is compiled, one word a line; anything else
# (an error, "go: downloading ...") is passed on.
n=0 next=10
while IFS= read -r line; do
  if [[ "$line" =~ ^[^[:space:]\#]+$ ]]; then
    n=$((n + 1))
    if ((n * 100 >= next * total)); then
      say "$n of $total packages compiled"
      while ((n * 100 >= next * total)); do next=$((next + 10)); done
    fi
  else
    printf '%s\n' "$line" >&2
  fi
done <"$fifo"
rc=0
wait "$gopid" || rc=$?
trap - EXIT
rm -f "$fifo"
((rc == 0)) || { say "failed (exit $rc)"; exit "$rc"; }
say "done: $n packages compiled, $((total - n > 0 ? total - n : 0)) cached"

#!/usr/bin/env bash
# Builds ipybox from this checkout and installs it as $PREFIX/bin/ipybox
# (PREFIX defaults to ~/.local). Safe to run again: it replaces the binary
# atomically, and does nothing else. Says so when that directory is not on
# PATH, since the Claude Code plugin runs `ipybox` from PATH.
#   scripts/install.sh                 # ~/.local/bin/ipybox
#   PREFIX=/usr/local scripts/install.sh
set -euo pipefail
# go.mod names Go 1.27.3: the go command fetches that toolchain from the
# module proxy once (a machine's own Go ignores go.mod's toolchain line).
export GOTOOLCHAIN=go1.27.3
cd "$(dirname "$0")/.."

say() { printf 'install: %s\n' "$*" >&2; }

command -v go >/dev/null || { say "Go is missing: install Go 1.26 or newer (https://go.dev/dl; the scripts then fetch Go 1.27.3 through GOTOOLCHAIN), or run scripts/setup.sh"; exit 1; }
prefix=${PREFIX:-$HOME/.local}
bindir=$prefix/bin
mkdir -p "$bindir"

# Go stamps the commit itself in a plain clone, but not in a git worktree
# nor under GOFLAGS=-buildvcs=false: pass it explicitly so that
# `ipybox version` always names it.
ldflags=""
if rev=$(git rev-parse --short=12 HEAD 2>/dev/null); then
  [ -z "$(git status --porcelain --untracked-files=no 2>/dev/null)" ] || rev="$rev+dirty"
  ldflags="-X main.commit=$rev"
fi

tmp=$(mktemp "$bindir/.ipybox.XXXXXX")
trap 'rm -f "$tmp"' EXIT
go build -ldflags "$ldflags" -o "$tmp" ./cmd/ipybox
chmod 0755 "$tmp"
mv -f "$tmp" "$bindir/ipybox"
trap - EXIT
say "installed $("$bindir/ipybox" version) as $bindir/ipybox"

case ":$PATH:" in
  *":$bindir:"*) ;;
  *)
    say "$bindir is not on your PATH, so neither Claude Code nor your shell finds ipybox there."
    say "Add it, e.g. to ~/.profile:  export PATH=\"$bindir:\$PATH\""
    ;;
esac
command -v ipybox >/dev/null && [ "$(command -v ipybox)" != "$bindir/ipybox" ] &&
  say "note: another ipybox comes first on PATH: $(command -v ipybox)"
exit 0

#!/usr/bin/env bash
# Installs what ipybox and its tests need on a Debian machine, skipping
# whatever is already there. Safe to run again and again. With --demo,
# only what scripts/demo.sh runs: the kernel's Python stack (PyPI's pinned
# venv) and bubblewrap (the demo's MCP server is the Go MCP SDK's example,
# which the demo builds).
#   - Debian packages: the kernel's Python stack, bubblewrap, node/npm,
#     the wheel build's tools (scripts/wheels.sh), pipx and prometheus
#   - npm test servers, pinned by tools/npm/package-lock.json
#   - PyPI's kernel stack (ipykernel 7...), a venv from a pinned, hashed
#     requirements file (scripts/pyvenv.sh pystack)
#   - dockerd running, and the ipybox image (scripts/dockerd.sh, scripts/image.sh)
set -euo pipefail
# go.mod names Go 1.27.3: the go command fetches that toolchain from the
# module proxy once (a machine's own Go ignores go.mod's toolchain line).
export GOTOOLCHAIN=go1.27.3
cd "$(dirname "$0")/.."

say() { printf 'setup: %s\n' "$*" >&2; }

# --demo: only what scripts/demo.sh runs (the kernel's Python stack, as
# PyPI's pinned venv, and the sandbox), for a first run of under three
# minutes (103 s measured on a fresh two-core machine); no node or npm
# (about 390 Debian packages), no test tools, no other venv, no Docker
# image.
demo=0
case "${1:-}" in
  --demo) demo=1 ;;
  "") ;;
  *) say "usage: scripts/setup.sh [--demo]"; exit 2 ;;
esac

# Debian packages ipybox uses at run time and in its tests.
pkgs=(
  python3-ipykernel python3-matplotlib python3-pydantic python3-numpy
  python3-jupyter-client   # the benchmark anchor (Python's jupyter_client)
  python3-jupyter-server   # the remote-kernel (gateway) tests' Jupyter Server
  python3-websocket        # the gateway benchmark's Python websocket anchor
  python3-venv python3-pip # the kernel's virtualenv and install_package
  python3-build python3-setuptools python3-wheel  # scripts/wheels.sh, offline (--no-isolation)
  pipx                     # the wheel tests' stand-in for uvx
  python3-dill             # durable sessions: the kernel saves its namespace
  python3-requests         # the egress tests: an ordinary HTTP client in the kernel
  bubblewrap               # the sandbox
  nodejs npm               # the MCP reference servers used by the tests
  docker.io debootstrap    # the container backend, and its image's Debian base
  prometheus               # the observability test's scraper of ipybox mcp --metrics-addr
  chromium                 # the web page's browser test (driven by playwright-core, tools/npm)
  python3-nbformat         # the notebook export's validator
)
if ((demo)); then
  # The kernel's stack comes from PyPI (the venv below): Debian's
  # python3-matplotlib alone brings scipy, pythran, g++ and boost, some 200
  # packages that took minutes to install.
  pkgs=(python3-venv bubblewrap)
fi
# apt-get install, quiet but for a progress line per tenth of the download
# and of the installation (apt's status lines), its output kept for a
# failure. dpkg's --force-unsafe-io skips a sync per file (as Debian's own
# container images do): a few hundred packages install in a fraction of the
# time, and only a power cut during the install could leave a file torn.
apt_install() {
  local log t0=$SECONDS rc
  log=$(mktemp)
  set +e
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends \
    -o APT::Status-Fd=3 -o Dpkg::Options::=--force-unsafe-io "$@" 3>&1 >"$log" 2>&1 |
    { # status lines: dlstatus:N:PERCENT:MESSAGE and pmstatus:PACKAGE:PERCENT:MESSAGE
      dl=0 pm=0
      while IFS=: read -r kind _ pct msg; do
        pct=${pct%%.*}
        [[ "$pct" =~ ^[0-9]+$ ]] || continue
        case "$kind" in
          dlstatus) ((pct >= dl)) || continue; what=downloading; while ((pct >= dl)); do dl=$((dl + 10)); done ;;
          pmstatus) ((pct >= pm)) || continue; what=installing; while ((pct >= pm)); do pm=$((pm + 10)); done ;;
          *) continue ;;
        esac
        say "$what $pct%: $msg ($((SECONDS - t0)) s)"
      done
    }
  rc=${PIPESTATUS[0]}
  set -e
  if ((rc)); then
    tail -30 "$log" >&2
    say "apt-get install failed (exit $rc)"
    rm -f "$log"
    exit "$rc"
  fi
  rm -f "$log"
  say "installed $# Debian packages and their dependencies in $((SECONDS - t0)) s"
}

missing=()
for p in "${pkgs[@]}"; do
  # nodejs/npm may come from elsewhere than Debian (as on the CI image).
  case "$p" in
    nodejs) command -v node >/dev/null && continue ;;
    npm) command -v npm >/dev/null && continue ;;
  esac
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  say "installing Debian packages: ${missing[*]}"
  $sudo apt-get update -qq
  apt_install "${missing[@]}"
fi

if ((demo)); then
  # The kernel's Python stack for the demo: PyPI's, the venv the tests also
  # run on (ipykernel 7, matplotlib, numpy, pydantic; pinned and hashed).
  scripts/pyvenv.sh pystack >/dev/null
  say "ready for the demo"
  exit 0
fi

# The tests' npm servers, exactly as locked by tools/npm. Re-install only
# when the lockfile changed since the last install.
npmdir=tools/npm
lock=$npmdir/package-lock.json
stamp=$npmdir/node_modules/.ipybox-lock
if [ -L "$npmdir/node_modules" ] && ! cmp -s "$lock" "$stamp"; then
  # npm ci empties the folder a link leads to (another checkout's, shared):
  # never reinstall through a link.
  say "WARNING: $npmdir/node_modules links to $(readlink "$npmdir/node_modules"), installed from another lockfile than $lock; not reinstalling through the link (remove it to install here)"
elif ! [ -f "$stamp" ] || ! cmp -s "$lock" "$stamp"; then
  say "installing npm servers from $lock"
  (cd "$npmdir" && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
  cp "$lock" "$stamp"
fi

# PyPI's Python stacks, each a venv from a pinned, hashed requirements file
# (scripts/pyvenv.sh; cached, made again only when the file changes):
# pystack: ipykernel 7 and friends, the tests' second kernel environment;
# uv: uv and uvx, for the tests of `uvx ipybox mcp`; eg: Jupyter Enterprise
# Gateway 3.3.0, for the gateway tests.
for venv in pystack uv eg; do
  scripts/pyvenv.sh "$venv" >/dev/null
done

command -v go >/dev/null || { say "Go is missing: install Go 1.26 or newer (https://go.dev/dl; the scripts then fetch Go 1.27.3 through GOTOOLCHAIN)"; exit 1; }

# The container backend: a running daemon and the image (cached: seconds
# when nothing changed). IPYBOX_SKIP_IMAGE=1 skips both. A failure here is
# loud but not fatal: only the container tests need Docker, and they fail
# under CI=true (and skip locally) when it is missing.
if [ "${IPYBOX_SKIP_IMAGE:-}" != 1 ]; then
  if ! scripts/dockerd.sh; then
    say "WARNING: no Docker daemon; the container tests will fail under CI=true (see above)"
  elif ! scripts/image.sh; then
    say "WARNING: the ipybox image did not build; the container tests will fail under CI=true (see above)"
  fi
fi
say "ready"

#!/usr/bin/env bash
# Makes, or reuses, a virtualenv of PyPI packages from a pinned and hashed
# requirements file, and prints the virtualenv's folder on stdout:
#
#   scripts/pyvenv.sh pystack   # PyPI's kernel stack: the tests' second environment
#   scripts/pyvenv.sh uv        # uv and uvx (the uvx entry point's tests)
#   scripts/pyvenv.sh eg        # Jupyter Enterprise Gateway (the gateway tests)
#
# tools/NAME/requirements.txt names every package with its version and
# hashes (tools/NAME/requirements.in says how it was compiled); pip
# installs exactly those, as wheels, with --require-hashes: nothing else
# from PyPI, no build step, never into a system Python. The folder is
# $IPYBOX_CACHE_DIR/venvs/NAME (default ~/.cache/ipybox), shared by every
# checkout of the project. It keeps a copy of what it was made from (the
# requirements and the base interpreter), and is made again when that
# changes; otherwise a run does nothing. Concurrent runs wait for each
# other (flock).
#
# The base interpreter is Debian's /usr/bin/python3 (scripts/setup.sh
# installs it with python3-venv), or $IPYBOX_VENV_BASE_PYTHON.
set -euo pipefail
cd "$(dirname "$0")/.."

say() { printf 'pyvenv: %s\n' "$*" >&2; }

name=${1:-}
req=tools/$name/requirements.txt
[ -n "$name" ] && [ -f "$req" ] || { say "usage: scripts/pyvenv.sh NAME, where tools/NAME/requirements.txt exists (got ${name:-nothing})"; exit 2; }
base=${IPYBOX_VENV_BASE_PYTHON:-/usr/bin/python3}
[ -x "$base" ] || { say "$base is missing: run scripts/setup.sh (apt-get install python3-venv), or set IPYBOX_VENV_BASE_PYTHON"; exit 1; }

cache=${IPYBOX_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/ipybox}
dir=$cache/venvs/$name
mkdir -p "$cache/venvs"

# What the folder was made from: the requirements and the base interpreter.
want=$( { cat "$req"; printf '# base %s ' "$base"; "$base" -c 'import sys; print(sys.version)'; } )
stamp=$dir/.ipybox-made-from

exec 9>"$dir.lock"
flock 9   # bound: another run's install, which pip bounds with its own timeouts
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  echo "$dir"
  exit 0
fi

say "making $dir from $req (pinned and hashed; a minute or two the first time)"
start=$SECONDS
rm -rf "$dir"
"$base" -m venv "$dir"
# pip's own lines become a progress line per tenth of the packages
# fetched, and one for the install; all of them are kept for a failure.
total=$(grep -c '^[A-Za-z0-9]' "$req")
log=$(mktemp)
set +e
"$dir/bin/python" -m pip install --progress-bar off --disable-pip-version-check --no-input \
  --require-hashes --no-deps --only-binary=:all: -r "$req" 2>&1 | tee "$log" |
  {
    n=0 next=10
    while IFS= read -r line; do
      case "$line" in
        Collecting\ *)
          n=$((n + 1))
          if ((n * 100 >= next * total)); then
            say "$name: fetched $n of $total packages ($((SECONDS - start)) s)"
            while ((n * 100 >= next * total)); do next=$((next + 10)); done
          fi
          ;;
        Installing\ collected\ packages*) say "$name: installing $n packages ($((SECONDS - start)) s)" ;;
      esac
    done
  }
rc=${PIPESTATUS[0]}
set -e
if ((rc)); then
  cat "$log" >&2
  rm -f "$log"
  say "pip install -r $req failed (exit $rc)"
  exit "$rc"
fi
rm -f "$log"
# The stamp comes last: a run cut short leaves none, and the next one
# starts again.
printf '%s' "$want" >"$stamp"
say "made $dir in $((SECONDS - start)) s"
echo "$dir"

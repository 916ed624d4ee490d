#!/usr/bin/env bash
# Builds the ipybox Python package: one wheel per target, each carrying the
# cross-built ipybox binary as its `ipybox` script beside the Python API,
# and the sdist (the Python API alone, saying how to build from source).
# Offline, with Debian's tools: `python3 -m build --no-isolation` and
# setuptools (scripts/setup.sh installs them). python/setup.py says how a
# wheel gets its binary and its tag.
#
#   scripts/wheels.sh                      # into dist/
#   IPYBOX_WHEEL_DIR=/tmp/w scripts/wheels.sh
#
# Safe to run again: the output folder keeps the hash of everything that
# goes into the wheels (the binary's sources, python/, this script, the
# commit, the Go and setuptools versions), and a run with the same hash
# does nothing.
set -euo pipefail
# go.mod names Go 1.27.3: the go command fetches that toolchain from the
# module proxy once (a machine's own Go ignores go.mod's toolchain line).
export GOTOOLCHAIN=go1.27.3
cd "$(dirname "$0")/.."

say() { printf 'wheels: %s\n' "$*" >&2; }

# GOOS/GOARCH and the wheel's platform tag. A CGO_ENABLED=0 Go binary on
# Linux links no libc at all, so the oldest manylinux that pip knows by
# both spellings fits it; on macOS it says its minimum itself (LC_BUILD_VERSION,
# 13.0 for Go 1.27), which the tests compare with the tag.
targets=(
  linux/amd64:manylinux_2_17_x86_64.manylinux2014_x86_64
  linux/arm64:manylinux_2_17_aarch64.manylinux2014_aarch64
  darwin/amd64:macosx_13_0_x86_64
  darwin/arm64:macosx_13_0_arm64
  windows/amd64:win_amd64
)

out=${IPYBOX_WHEEL_DIR:-dist}
release=$(sed -n 's/^const release = "\(.*\)"$/\1/p' cmd/ipybox/version.go)
[ -n "$release" ] || { say "cmd/ipybox/version.go has no 'const release = \"...\"' line"; exit 1; }
command -v go >/dev/null || { say "Go is missing: install Go 1.26 or newer (https://go.dev/dl; the scripts then fetch Go 1.27.3 through GOTOOLCHAIN)"; exit 1; }

# A Python with build, setuptools and wheel: the first python3 on PATH that
# has them, else the system's (Debian's python3-build is only there).
py=""
for c in $(type -ap python3) /usr/bin/python3; do
  if "$c" -c 'import build, setuptools, wheel' 2>/dev/null; then
    py=$c
    break
  fi
done
[ -n "$py" ] || { say "no python3 with build, setuptools and wheel: run scripts/setup.sh (apt-get install python3-build python3-setuptools python3-wheel)"; exit 1; }

rev=unknown
if r=$(git rev-parse --short=12 HEAD 2>/dev/null); then
  rev=$r
  [ -z "$(git status --porcelain --untracked-files=no 2>/dev/null)" ] || rev="$rev+dirty"
fi
# The wheels' zip timestamps: the commit's time, so that a rebuild of the
# same commit gives the same bytes.
export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || echo 315532800)}

# Everything that goes into the wheels. git ls-files also lists new files
# not yet committed, as image.sh does.
inputs() {
  git ls-files -z --cached --others --exclude-standard -- go.mod go.sum LICENSE scripts/wheels.sh \
    '*.go' ':(glob)internal/pyruntime/**' ':(glob)python/ipybox/*.py' python/pyproject.toml python/setup.py python/README.md \
    ':(exclude)*_test.go' ':(exclude)tools/**' ':(exclude)bench/**' ':(exclude,glob)**/testdata/**' |
    xargs -0 sha256sum
  echo "$rev $SOURCE_DATE_EPOCH $(go env GOVERSION) $("$py" -c 'import setuptools, wheel, build; print(setuptools.__version__, wheel.__version__, build.__version__)')"
  printf '%s\n' "${targets[@]}"
}
# One build at a time per output folder (two test runs of one checkout).
mkdir -p "$out"
if command -v flock >/dev/null; then
  exec 9>"$out/.lock"
  flock 9
fi
hash=$(inputs | sha256sum | cut -c1-32)
stamp=$out/.ipybox-wheels
expected=$(for t in "${targets[@]}"; do echo "ipybox-$release-py3-none-${t#*:}.whl"; done; echo "ipybox-$release.tar.gz")
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$hash" ]; then
  ok=1
  for f in $expected; do [ -f "$out/$f" ] || ok=0; done
  if [ $ok = 1 ]; then
    say "$out is up to date (ipybox $release, commit $rev)"
    exit 0
  fi
fi

start=$SECONDS
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# 1. The binaries, as the image builds them, stamped with the release.
ldflags="-s -w -X main.version=$release -X main.commit=$rev"
for t in "${targets[@]}"; do
  target=${t%%:*} os=${target%/*} arch=${target#*/}
  exe=ipybox
  [ "$os" = windows ] && exe=ipybox.exe
  say "building the $target binary"
  mkdir -p "$tmp/bin/$os-$arch"
  # scripts/gobuild.sh: go build with a progress line per tenth of the packages.
  GOOS=$os GOARCH=$arch CGO_ENABLED=0 scripts/gobuild.sh "wheels $target" -trimpath -ldflags "$ldflags" -o "$tmp/bin/$os-$arch/$exe" ./cmd/ipybox
done

# 2. The wheels' version is the one the Go build reports: `ipybox version`
# of a binary this machine runs ("ipybox 0.10.0 (commit ..., go1.26 linux/amd64)").
host=$tmp/bin/$(go env GOHOSTOS)-$(go env GOHOSTARCH)/ipybox
if ! [ -x "$host" ]; then
  mkdir -p "$tmp/host"
  host=$tmp/host/ipybox
  CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" -o "$host" ./cmd/ipybox
fi
version=$("$host" version | awk '{print $2}')
[ "$version" = "$release" ] || { say "the built binary says version $version, not $release"; exit 1; }

# 3. The Python project, staged: python/ with the licence beside it and
# the version written in, so that the checkout gets no build/ or egg-info.
stage=$tmp/stage
mkdir -p "$stage/ipybox"
cp python/pyproject.toml python/setup.py python/README.md LICENSE "$stage/"
cp python/ipybox/*.py "$stage/ipybox/"
cat >"$stage/ipybox/_version.py" <<PY
# The version of this package: the ipybox binary's (\`ipybox version\`),
# written by scripts/wheels.sh.
__version__ = "$version"
PY

build() { # DIR ARGS...: python -m build, its chatter kept for a failure
  local dir=$1
  shift
  if ! (cd "$dir" && "$py" -m build --no-isolation --outdir "$tmp/dist" "$@" . >"$tmp/build.log" 2>&1); then
    cat "$tmp/build.log" >&2
    say "python -m build $* failed in $dir"
    exit 1
  fi
}

# 4. One wheel per target, each from a fresh copy of the stage.
for t in "${targets[@]}"; do
  target=${t%%:*} plat=${t#*:} os=${target%/*} arch=${target#*/}
  exe=ipybox
  [ "$os" = windows ] && exe=ipybox.exe
  dir=$tmp/wheel-$os-$arch
  cp -R "$stage" "$dir"
  mkdir -p "$dir/_bin"
  cp "$tmp/bin/$os-$arch/$exe" "$dir/_bin/$exe"
  chmod 0755 "$dir/_bin/$exe"
  say "packing the $plat wheel"
  IPYBOX_WHEEL_BINARY=_bin/$exe IPYBOX_WHEEL_PLATFORM=$plat build "$dir" --wheel
done

# 5. The sdist: the Python API and how to build the rest.
say "packing the sdist"
build "$stage" --sdist

# 6. Replace the old wheels in the output folder, then stamp it.
rm -f "$out"/ipybox-*.whl "$out"/ipybox-*.tar.gz "$stamp"
for f in $expected; do
  [ -f "$tmp/dist/$f" ] || { say "python -m build made no $f (made: $(ls "$tmp/dist"))"; exit 1; }
  mv "$tmp/dist/$f" "$out/$f"
done
echo "$hash" >"$stamp"
say "built ipybox $version (commit $rev) in $((SECONDS - start)) s:"
(cd "$out" && ls -l $expected | awk '{printf "  %6.1f MB  %s\n", $5/1e6, $9}') >&2

#!/usr/bin/env bash
# Builds the ipybox image (ipybox:latest) from the Dockerfile at the
# repository root, on a machine that cannot pull from a public registry.
# Safe to run again and again; a second run with no change takes seconds.
#
#   1. The Debian base (ipybox-base:bookworm) is made locally from Debian's
#      own packages when it is missing: debootstrap --variant=minbase
#      against this machine's apt mirror, then `docker import`.
#   2. The Go build stage's image (ipybox-go:<go version>) is that base plus
#      this machine's Go toolchain, made when missing.
#   3. The build context is the binary's sources plus `go mod vendor`, so
#      the build stage needs no network. Its content hash tags the result
#      (ipybox:src-<hash>); when that tag exists, nothing is built.
#
# Environment: IPYBOX_IMAGE (default ipybox:latest), IPYBOX_MIRROR (default:
# the first deb.debian.org-style URI in /etc/apt), IPYBOX_SUITE (bookworm).
set -euo pipefail
# go.mod names Go 1.27.3: the go command fetches that toolchain from the
# module proxy once (a machine's own Go ignores go.mod's toolchain line).
export GOTOOLCHAIN=go1.27.3
cd "$(dirname "$0")/.."

say() { printf 'image: %s\n' "$*" >&2; }

scripts/dockerd.sh
image=${IPYBOX_IMAGE:-ipybox:latest}
suite=${IPYBOX_SUITE:-bookworm}
base=ipybox-base:$suite

mirror=${IPYBOX_MIRROR:-}
if [ -z "$mirror" ]; then
  mirror=$(grep -hsE '^(URIs:|deb )' /etc/apt/sources.list /etc/apt/sources.list.d/*.sources /etc/apt/sources.list.d/*.list 2>/dev/null |
    grep -v security | head -1 | sed -E 's/^URIs:[[:space:]]*//; s/^deb[[:space:]]+(\[[^]]*\][[:space:]]+)?//; s/[[:space:]].*//' || true)
fi
mirror=${mirror:-http://deb.debian.org/debian}

# 1. The base.
if ! docker image inspect "$base" >/dev/null 2>&1; then
  command -v debootstrap >/dev/null || { say "debootstrap is missing: apt-get install debootstrap"; exit 1; }
  root=$(mktemp -d /var/tmp/ipybox-base.XXXXXX)
  trap 'rm -rf "$root"' EXIT
  say "making $base with debootstrap from $mirror (takes minutes, once)"
  start=$SECONDS
  # Its phases as progress lines; everything in $root.log.
  set +e
  debootstrap --variant=minbase "$suite" "$root" "$mirror" 2>&1 | tee "$root.log" |
    { grep --line-buffered -E '^I: (Retrieving Release|Resolving dependencies|Checking component|Retrieving libc6|Validating libc6|Extracting libc6|Installing core packages|Unpacking the base system|Configuring the base system|Base system installed)' || true; } |
    while IFS= read -r line; do say "debootstrap: ${line#I: } ($((SECONDS - start)) s)"; done
  rc=${PIPESTATUS[0]}
  set -e
  [ "$rc" -eq 0 ] || { say "debootstrap failed; see $root.log"; exit 1; }
  # The same suites as a stock Debian image: updates and security fixes.
  sec=${mirror%/debian}/debian-security
  cat >"$root/etc/apt/sources.list" <<SRC
deb $mirror $suite main
deb $mirror $suite-updates main
deb $sec $suite-security main
SRC
  rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
  tar -C "$root" --numeric-owner -c . | docker import -c 'CMD ["/bin/bash"]' - "$base" >/dev/null
  rm -f "$root.log"
  say "made $base in $((SECONDS - start)) s"
fi

# 2. The Go build stage's image.
gover=$(go env GOVERSION)
goimg=ipybox-go:$gover
if ! docker image inspect "$goimg" >/dev/null 2>&1; then
  say "making $goimg from $(go env GOROOT)"
  ctx=$(mktemp -d)
  trap 'rm -rf "$ctx"' EXIT
  printf 'FROM %s\nCOPY . /usr/local/go\nENV PATH=/usr/local/go/bin:$PATH CGO_ENABLED=0 GOTOOLCHAIN=local\n' "$base" >"$ctx/Dockerfile"
  tar -C "$(go env GOROOT)" --exclude=./test --exclude=./doc -c . | tar -C "$ctx" -x
  DOCKER_BUILDKIT=0 docker build -q -t "$goimg" "$ctx" >/dev/null
  rm -rf "$ctx"
fi

# 3. The image.
ctx=$(mktemp -d)
trap 'rm -rf "$ctx"' EXIT
# Only what the build reads (the binary's Go sources, the Python files it
# embeds, the module files, the Dockerfile): an edit to docs or tests does
# not rebuild the image.
# Every file a go:embed names must be here (the web page's assets, the
# first-use Dockerfile): a missing one fails the image's go build.
git ls-files -z --cached --others --exclude-standard -- go.mod go.sum Dockerfile '*.go' '*.py' '*.Dockerfile' \
  ':(glob)internal/pyruntime/**' ':(glob)mcpserver/ui/**' ':(exclude)*_test.go' ':(exclude)tools/**' ':(exclude)bench/**' \
  ':(exclude)python/**' ':(exclude)examples/**' \
  ':(exclude,glob)**/testdata/**' |
  xargs -0 tar -c --ignore-failed-read 2>/dev/null | tar -C "$ctx" -x
go mod vendor -o "$ctx/vendor"
# The commit `ipybox version` reports (the context has no .git), with
# +dirty for uncommitted changes; it is part of the image's identity.
commit=$(git rev-parse --short=12 HEAD 2>/dev/null || true)
if [ -n "$commit" ] && [ -n "$(git status --porcelain --untracked-files=no 2>/dev/null)" ]; then commit="$commit+dirty"; fi
hash=$( (cd "$ctx" && find . -type f -print0 | sort -z | xargs -0 sha256sum; echo "$base $goimg $commit") | sha256sum | cut -c1-16)
tag=ipybox:src-$hash
if docker image inspect "$tag" >/dev/null 2>&1; then
  docker tag "$tag" "$image"
  say "$image is up to date ($tag)"
  exit 0
fi
say "building $image ($tag)"
start=$SECONDS
release=$(sed -n 's/^const release = "\(.*\)"$/\1/p' cmd/ipybox/version.go) # the image's version (TestVersionsAgree)
# One progress line per Dockerfile step (the legacy builder's "Step N/M"),
# and one every 30 s of a long step (the go build, apt's few hundred
# packages), so that no minute passes in silence.
blog=$(mktemp)
set +e
DOCKER_BUILDKIT=0 docker build --build-arg BASE="$base" --build-arg GO_IMAGE="$goimg" --build-arg VERSION="${release:-devel}" --build-arg COMMIT="$commit" -t "$tag" "$ctx" 2>&1 |
  tee "$blog" | {
    step="starting"
    while :; do
      if IFS= read -r -t 30 line; then
        case "$line" in Step\ *) step=${line:0:100}; say "$step ($((SECONDS - start)) s)" ;; esac
      elif (($? > 128)); then
        say "still at ${step%% :*} ($((SECONDS - start)) s)"
      else
        break
      fi
    done
  }
rc=${PIPESTATUS[0]}
set -e
[ "$rc" -eq 0 ] || { say "docker build failed:"; tail -20 "$blog" >&2; rm -f "$blog"; exit 1; }
rm -f "$blog"
docker tag "$tag" "$image"
# Older source tags are dead weight.
docker image ls --format '{{.Repository}}:{{.Tag}}' ipybox | grep '^ipybox:src-' | grep -v "^$tag\$" | xargs -r docker rmi >/dev/null 2>&1 || true
say "built $image in $((SECONDS - start)) s ($(docker image inspect -f '{{.Size}}' "$image" | awk '{printf "%.0f MB", $1/1e6}'))"

#!/usr/bin/env bash
# Builds the ipybox binary and vets every package (tests included) for each
# system agents run ipybox on, without cgo, so that a break in a
# platform-specific file fails here and not on a user's machine. The build
# cache keeps a repeated run to seconds.
set -euo pipefail
# go.mod names Go 1.27.3: the go command fetches that toolchain from the
# module proxy once (a machine's own Go ignores go.mod's toolchain line).
export GOTOOLCHAIN=go1.27.3
cd "$(dirname "$0")/.."
targets=(linux/amd64 linux/arm64 darwin/arm64 darwin/amd64 windows/amd64)
for target in "${targets[@]}"; do
  os=${target%/*} arch=${target#*/}
  echo "crossbuild: $target" >&2
  GOOS=$os GOARCH=$arch CGO_ENABLED=0 go build -o /dev/null ./cmd/ipybox
  GOOS=$os GOARCH=$arch CGO_ENABLED=0 go vet ./...
done

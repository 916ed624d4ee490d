#!/usr/bin/env bash
# Sets up the machine (scripts/setup.sh) and runs the whole test suite:
# formatting, vet (for every target system: scripts/crossbuild.sh), and
# every test tier under the race detector, then checks that no process
# ipybox started is left.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/setup-claude.sh   # the Claude Code CLI, for the plugin's tier-4 test only

unformatted=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go' -not -path './tools/*'))
if [ -n "$unformatted" ]; then
  echo "gofmt: these files need formatting:" >&2
  echo "$unformatted" >&2
  exit 1
fi
go vet ./...
scripts/crossbuild.sh
# No process that ipybox started may outlive the tests: each test closes
# what it starts, and a killed ipybox takes its sandboxes, kernels and
# containers with it.
before=$(mktemp)
trap 'rm -f "$before"' EXIT
scripts/leftovers.sh snapshot "$before"
status=0
go test -race -timeout 20m ./... "$@" || status=$?
scripts/leftovers.sh check "$before" || status=1
exit $status

#!/usr/bin/env bash
# Runs govulncheck on the module, offline, and fails when a vulnerability
# that the code reaches is found (govulncheck exits 3). The database is the
# golang.org/x/vulndb module's OSV files, from the Go module proxy, turned
# into govulncheck's -db file:// layout by the module's own cmd/indexdb;
# govulncheck and the database are pinned, and cached under
# ${XDG_CACHE_HOME:-~/.cache}/ipybox/vulncheck, so a second run only scans.
# Bump VULNDB (go list -m golang.org/x/vulndb@latest) to learn of new
# vulnerabilities.
set -euo pipefail
export GOTOOLCHAIN=${GOTOOLCHAIN:-go1.27.3}
GOVULNCHECK=v1.10.0
VULNDB=v0.0.0-20261105234957-e22db6528018
cd "$(dirname "$0")/.."
cache=${XDG_CACHE_HOME:-$HOME/.cache}/ipybox/vulncheck
bin=$cache/govulncheck-$GOVULNCHECK
db=$cache/vulndb-$VULNDB
mkdir -p "$cache"
if [ ! -x "$bin/govulncheck" ]; then
  GOBIN="$bin" go install "golang.org/x/vuln/cmd/govulncheck@$GOVULNCHECK"
fi
if [ ! -f "$db/index/modules.json" ]; then
  src=$(go mod download -json "golang.org/x/vulndb@$VULNDB" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
  if [ ! -d "$src/data/osv" ]; then
    echo "vulncheck: golang.org/x/vulndb@$VULNDB has no data/osv folder (in '$src')" >&2
    exit 1
  fi
  tmp=$(mktemp -d "$cache/.vulndb.XXXXXX")
  trap 'rm -rf "$tmp"' EXIT
  (cd "$tmp" && go run "golang.org/x/vulndb/cmd/indexdb@$VULNDB" -vulns "$src/data/osv" -out "$tmp/db")
  rm -rf "$db"
  mv "$tmp/db" "$db"
fi
# govulncheck asks the go command on PATH which release it is, with
# GO111MODULE=off, which ignores GOTOOLCHAIN (golang/go#68495): a machine's
# older Go would then type-check the newer standard library and fail. So
# the toolchain that go.mod names comes first on PATH.
PATH="$(go env GOROOT)/bin:$PATH" "$bin/govulncheck" -db "file://$db" ./...

#!/usr/bin/env bash
# Sets up the machine (scripts/setup.sh) and runs the whole test suite:
# formatting, vet (for every target system: scripts/crossbuild.sh),
# govulncheck (scripts/vulncheck.sh), and
# every test tier under the race detector, then checks that no process
# ipybox started is left.
set -euo pipefail
# go.mod names Go 1.27.3: the go command fetches that toolchain from the
# module proxy once (a machine's own Go ignores go.mod's toolchain line).
export GOTOOLCHAIN=go1.27.3
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
# staticcheck, pinned: go run fetches this version from the module proxy
# once (it is cached after), and go.mod gains no dependency for it.
STATICCHECK_VERSION=v0.8.2
go run "honnef.co/go/tools/cmd/staticcheck@$STATICCHECK_VERSION" ./...
# No known vulnerability that the code reaches, in the toolchain or a
# dependency (offline, with a pinned database: scripts/vulncheck.sh).
scripts/vulncheck.sh
scripts/crossbuild.sh
# No process that ipybox started may outlive the tests: each test closes
# what it starts, and a killed ipybox takes its sandboxes, kernels and
# containers with it.
before=$(mktemp)
trap 'rm -f "$before"' EXIT
scripts/leftovers.sh snapshot "$before"
# The packages, the slowest first: go test starts them in the order they
# are named, as many at a time as there are cores, so a slow package named
# last runs alone at the end (python did, for minutes). The slow ones are
# named here, by their measured times; every other package follows in go
# list's order, so a new package is tested all the same.
slow=(. ./python ./cmd/ipybox ./internal/kernel ./internal/toolserver ./mcpserver ./internal/seccomp ./internal/sandbox ./internal/mcpconn)
mod=$(go list -m)
all=$(go list ./...)
pkgs=()
for p in "${slow[@]}"; do
  p=$mod${p#.}
  grep -qxF "$p" <<<"$all" && pkgs+=("$p")
done
for p in $all; do
  [[ " ${pkgs[*]} " == *" $p "* ]] || pkgs+=("$p")
done
status=0
go test -race -timeout 20m "${pkgs[@]}" "$@" || status=$?

# The sandbox's suites again, against kernels forked into sandboxes of
# their own: ipybox mcp's default since issue 38 (docs/sandbox.md,
# "Forked kernels"). About 2-3 minutes; skipped in a targeted run.
if [ $# -eq 0 ]; then
  echo "test: the sandbox's suites against forked kernels" >&2
  # attack11 and attack12 start forked kernels of their own: not again.
  IPYBOX_TEST_SANDBOX_FORK=1 go test -race -timeout 15m -run '^(TestRedteam|TestAttack|TestSandbox)' -skip '^TestAttack1[12]' . || status=$?
fi

# --- issue 37: the kernel-facing tests again, on PyPI's kernel stack -------
# (ipykernel 7, jupyter_client 8, jupyter_server 2, dill 0.4: the venv
# scripts/pyvenv.sh pystack makes, which scripts/setup.sh has made) through
# IPYBOX_PYTHON: handshake and streaming, interrupt and restart, displays
# and plots, tool calls and approvals, shell approval, snapshots and
# restore, the sandbox, the pool, the fork server, Jupyter Server 2.x as a
# gateway, Enterprise Gateway 3.3.0 running PyPI's kernel, ipykernel 7's
# own changes (TestIPykernel7*), the doctor's versions, and the Python API
# (ipybox mcp's workspace virtualenv made from the venv's interpreter, with
# its packages and, sandboxed, its prefix bound: TestPythonAPI, ~2.5 minutes
# at load 20). About 5-6 minutes here; skipped only with "$@" (a targeted run).
if [ $# -eq 0 ]; then
  pystack=$(scripts/pyvenv.sh pystack)/bin/python
  pypi_root='TestOutputs|TestPythonErrors|TestStreamingIsLive|TestStreamKeepsStdoutAndStderrApart|TestPlotsBecomeImages|TestDisplaysAndClearOutput|TestInterrupt|TestCancelInterruptsPromptly|TestIgnoredInterruptRestarts|TestTimeoutKeepsState|TestStatePersistsAndReset|TestKernelDeath|TestCloseLeavesNothing|TestToolCallsOverAllTransports|TestApprovals|TestTimeoutBudgetAndApproval|TestCancelWhileApprovalPending|TestAttackShellEntryPoints|TestSnapshotRestore|TestSandboxedKernelStillWorks|TestSandboxAttacksFromKernel|TestSandboxNeverRunsWorkspacePythonOnHost|TestPool|TestPoolColdGetAndFailure|TestZygoteExecutors|TestGatewayExecutor|TestGatewayToolServerTLS|TestGatewayDetachAttach|TestEnterpriseGateway'
  echo "test: the kernel-facing tests on PyPI's stack ($pystack)" >&2
  IPYBOX_PYTHON=$pystack go test -race -timeout 15m ./internal/kernel || status=$?
  IPYBOX_PYTHON=$pystack go test -race -timeout 15m -run "^($pypi_root)\$" . || status=$?
  IPYBOX_PYTHON=$pystack go test -race -timeout 15m -run '^(TestGatewaySessions|TestDoctor)$' ./mcpserver ./cmd/ipybox || status=$?
  IPYBOX_PYTHON=$pystack go test -timeout 15m -run '^TestPythonAPI$' ./python || status=$?
fi
# --- end of issue 37's block ------------------------------------------------
scripts/leftovers.sh check "$before" || status=1
exit $status

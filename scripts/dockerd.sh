#!/usr/bin/env bash
# Starts dockerd when no Docker daemon answers, and waits (bounded) until
# one does. Safe to run again and again. There is no systemd on these
# machines, so the daemon runs in its own session with a log file:
#   IPYBOX_DOCKERD_LOG (default /var/log/ipybox-dockerd.log)
# DOCKER_HOST, when set, names the daemon to check; then nothing is started.
set -euo pipefail

say() { printf 'dockerd: %s\n' "$*" >&2; }

command -v docker >/dev/null || { say "the docker CLI is missing: apt-get install docker.io"; exit 1; }
if docker info >/dev/null 2>&1; then
  exit 0
fi
if [ -n "${DOCKER_HOST:-}" ]; then
  say "DOCKER_HOST=$DOCKER_HOST does not answer; start that daemon, or unset DOCKER_HOST"
  exit 1
fi
command -v dockerd >/dev/null || { say "dockerd is missing: apt-get install docker.io"; exit 1; }
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
log=${IPYBOX_DOCKERD_LOG:-/var/log/ipybox-dockerd.log}
# A daemon that died leaves its pid file behind, and a new one refuses to
# start over it.
if [ -f /var/run/docker.pid ] && ! $sudo kill -0 "$(cat /var/run/docker.pid)" 2>/dev/null; then
  $sudo rm -f /var/run/docker.pid
fi
if ! [ -f /var/run/docker.pid ]; then
  say "starting dockerd (log: $log)"
  $sudo setsid dockerd >>"$log" 2>&1 </dev/null &
fi
for _ in $(seq 1 60); do
  if docker info >/dev/null 2>&1; then
    say "ready"
    exit 0
  fi
  sleep 0.5
done
say "dockerd did not answer within 30 s; see $log"
exit 1

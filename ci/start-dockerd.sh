#!/usr/bin/env bash
# Make sure a Docker engine answers on this machine, for the docker sandbox and its tests.
#
# Installs Debian's docker.io when dockerd is missing, starts dockerd in the background when
# the engine does not answer, and waits up to 60 s for `docker info`. Exits non-zero with a
# loud message when it cannot: CI must fail, never skip the sandbox tests silently.
# Idempotent: on a machine whose engine already answers it changes nothing. Run as root.
set -euo pipefail

WAIT_S="${DOCKERD_WAIT_S:-60}"
LOG="${DOCKERD_LOG:-/var/log/kernel-bot-dockerd.log}"

die() {
  echo "::error::start-dockerd: $*" >&2
  echo "" >&2
  echo "!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!" >&2
  echo "!!! start-dockerd FAILED: $*" >&2
  echo "!!! The docker sandbox cannot run; CI must not continue without it." >&2
  echo "!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!" >&2
  if [ -s "$LOG" ]; then
    echo "--- last lines of $LOG ---" >&2
    tail -n 40 "$LOG" >&2 || true
  fi
  exit 1
}

answers() { docker info >/dev/null 2>&1; }

if command -v docker >/dev/null 2>&1 && answers; then
  echo "start-dockerd: the Docker engine already answers"
  exit 0
fi

[ "$(id -u)" -eq 0 ] || die "must run as root to install or start dockerd (try: sudo $0)"

if ! command -v dockerd >/dev/null 2>&1 || ! command -v docker >/dev/null 2>&1; then
  echo "start-dockerd: installing Debian's docker.io"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update || die "apt-get update failed"
  NEEDRESTART_MODE=l apt-get install -y docker.io || die "apt-get install -y docker.io failed"
  command -v dockerd >/dev/null 2>&1 || die "docker.io installed, but dockerd is not on PATH"
fi

# A stale pid file (from a dockerd that died) makes a new dockerd refuse to start.
running() { [ -f /var/run/docker.pid ] && kill -0 "$(cat /var/run/docker.pid)" 2>/dev/null; }
if ! running; then
  rm -f /var/run/docker.pid
  echo "start-dockerd: starting dockerd (log: $LOG)"
  mkdir -p "$(dirname "$LOG")"
  # containerd is started by dockerd itself when not already running.
  nohup dockerd >>"$LOG" 2>&1 &
fi

for _ in $(seq 1 "$WAIT_S"); do
  if answers; then
    echo "start-dockerd: the Docker engine answers ($(docker version --format '{{.Server.Version}}'))"
    exit 0
  fi
  sleep 1
done
die "the Docker engine did not answer within ${WAIT_S} s"

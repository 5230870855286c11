#!/usr/bin/env bash
# Make a docker engine answer on this machine, and install what the provider's test images are
# built from (no registry is assumed reachable) and Debian's docker-registry, which the tests
# start on a free local port to push those images to and pull them back by digest. Idempotent: installs only what is missing and
# starts dockerd only when no engine answers.
set -euo pipefail

sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"

missing=()
command -v dockerd >/dev/null || missing+=(docker.io)
command -v debootstrap >/dev/null || [ -x /usr/sbin/debootstrap ] || missing+=(debootstrap)
dpkg -s busybox-static >/dev/null 2>&1 || missing+=(busybox-static)
command -v docker-registry >/dev/null || missing+=(docker-registry)
command -v ssh >/dev/null || missing+=(openssh-client)  # the pod tests log in with it
if [ ${#missing[@]} -gt 0 ]; then
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
  # the package's own service (port 5000) is not used: each test run starts its own registry
  if [[ " ${missing[*]} " == *" docker-registry "* ]] && command -v systemctl >/dev/null; then
    $sudo systemctl disable --now docker-registry >/dev/null 2>&1 || true
  fi
fi

engine_answers() { docker version --format '{{.Server.Version}}' >/dev/null 2>&1; }

if ! engine_answers; then
  log=${DOCKERD_LOG:-/var/log/dockerd.log}
  # setsid: the engine outlives this script and the test run that started it
  $sudo setsid dockerd >>"$log" 2>&1 < /dev/null &
  for _ in $(seq 1 120); do
    engine_answers && break
    sleep 0.5
  done
  engine_answers || { echo "dockerd did not start; see $log" >&2; tail -20 "$log" >&2; exit 1; }
fi

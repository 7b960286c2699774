#!/usr/bin/env bash
# Usage: scripts/with-k8s.sh CMD [ARGS...]
#
# Runs CMD with a real single-node Kubernetes cluster (scripts/k8s-cluster.sh):
# builds it (cached), brings it up, exports KUBECONFIG and
# CODE_SANDBOXES_K8S_IMPORT (a command prefix: "$CODE_SANDBOXES_K8S_IMPORT
# IMAGE.tar" imports a docker-save/OCI tarball for pods with imagePullPolicy
# Never), runs CMD, and always tears the cluster down. Exits with CMD's status.
#
# When the cluster cannot come up (not root, no Go, build or start failure):
# with CI=true this fails loudly; otherwise CMD runs without KUBECONFIG, so the
# Kubernetes tests skip. CODE_SANDBOXES_K8S=off skips the cluster on purpose.
# With CI=true, a teardown that leaves state behind also fails a passing CMD.
# The host-wide cluster lock is held for the whole run, so concurrent runs on
# one machine wait for each other (CODE_SANDBOXES_K8S_LOCK_TIMEOUT, default
# 1800 s).
set -uo pipefail

[ $# -gt 0 ] || { sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit 2; }

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
CLUSTER=$HERE/k8s-cluster.sh
LOCK=/var/cache/code-sandboxes/k8s/cluster.lock # as in k8s-cluster.sh
export CODE_SANDBOXES_K8S_RUN_DIR=${CODE_SANDBOXES_K8S_RUN_DIR:-/run/code-sandboxes-k8s}

say() { printf 'with-k8s: %s\n' "$*" >&2; }

# without_cluster REASON: in CI a failure, elsewhere CMD runs without a cluster.
without_cluster() {
  if [ "${CI:-}" = true ]; then
    say "ERROR: $1 (CI=true: a Kubernetes cluster is required)"
    exit 1
  fi
  say "$1; running without Kubernetes (its tests skip)"
  shift
  exec 9>&-
  exec env -u KUBECONFIG -u CODE_SANDBOXES_K8S_IMPORT -u CODE_SANDBOXES_K8S_NETWORKPOLICY "$@"
}

if [ "${CODE_SANDBOXES_K8S:-}" = off ]; then
  say "CODE_SANDBOXES_K8S=off"
  exec env -u KUBECONFIG -u CODE_SANDBOXES_K8S_IMPORT -u CODE_SANDBOXES_K8S_NETWORKPOLICY "$@"
fi
[ "$(id -u)" -eq 0 ] || without_cluster "not root" "$@"
command -v go >/dev/null || without_cluster "go is not installed" "$@"
command -v flock >/dev/null || without_cluster "flock is not installed" "$@"

mkdir -p "$(dirname "$LOCK")" || without_cluster "cannot create $(dirname "$LOCK")" "$@"
exec 9>>"$LOCK"
if ! flock -n 9; then
  say "waiting for the cluster lock (held by: $(cat "$LOCK.owner" 2>/dev/null || echo unknown))"
  flock -w "${CODE_SANDBOXES_K8S_LOCK_TIMEOUT:-1800}" 9 || without_cluster "timed out waiting for the cluster lock" "$@"
fi
echo "pid $$ (with-k8s.sh $*)" >"$LOCK.owner"
export CODE_SANDBOXES_K8S_LOCK_HELD=1

"$CLUSTER" build || without_cluster "building Kubernetes failed" "$@"

down_status=0
teardown() {
  trap - EXIT INT TERM
  "$CLUSTER" down 9>&- || down_status=$?
}
trap teardown EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

if ! "$CLUSTER" up 9>&- >/dev/null; then
  teardown
  without_cluster "the Kubernetes cluster did not come up (see the errors above)" "$@"
fi
eval "$("$CLUSTER" env)"
export KUBECONFIG CODE_SANDBOXES_K8S_IMPORT CODE_SANDBOXES_K8S_NETWORKPOLICY
say "cluster up; KUBECONFIG=$KUBECONFIG"

# CMD runs in the background so that a SIGTERM or SIGINT sent to this script
# alone (e.g. by `timeout`) is handled at once: it is passed on to CMD as
# SIGTERM (a background command ignores SIGINT), then the cluster goes down.
"$@" 0<&0 9>&- &
child=$!
trap 'kill -TERM "$child" 2>/dev/null' INT TERM
wait "$child"
rc=$?
while kill -0 "$child" 2>/dev/null; do
  wait "$child"
  rc=$?
done
teardown
if [ "$down_status" -ne 0 ]; then
  say "WARNING: the cluster's teardown left state behind (see above)"
  [ "${CI:-}" = true ] && [ "$rc" -eq 0 ] && rc=1
fi
exit "$rc"

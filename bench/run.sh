#!/usr/bin/env bash
# Runs the benchmarks and writes BENCHMARKS.md at the repository root. The
# docker variant's numbers need a Docker engine: with-dockerd.sh starts one
# for the run when none answers; with-k8s.sh brings up the single-node
# Kubernetes cluster for the kubernetes variant's numbers.
set -euo pipefail
cd "$(dirname "$0")/.."
exec ./scripts/with-dockerd.sh ./scripts/with-k8s.sh go run ./bench "$@"

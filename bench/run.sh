#!/usr/bin/env bash
# Runs the benchmarks and writes BENCHMARKS.md at the repository root.
set -euo pipefail
cd "$(dirname "$0")/.."
exec go run ./bench "$@"

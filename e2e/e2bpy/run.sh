#!/usr/bin/env bash
# E2B's Python SDK (e2b) and code-interpreter SDK (e2b_code_interpreter), and
# the code-interpreter package's own Python tests (python/tests: sync, async,
# charts, images), unmodified, against a `code-sandboxes serve` on a fresh
# 127.0.0.1 port. README.md says what is needed and what each knob does.
#
#   ./run.sh                         # the whole suite
#   ./run.sh tests/sync/test_basic.py -x   # or any pytest arguments
#
# Needs root (serve's local sandboxes). Installs the Debian packages it
# needs itself (once; nothing when they are there).
set -euo pipefail
args=("$@")
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)

# The bare clones the SDKs and tests come from.
E2B_GIT_DIR=${E2B_GIT_DIR:-/work/.mirror/e2b-dev+E2B/repo}
CI_GIT_DIR=${CI_GIT_DIR:-/work/.mirror/e2b-dev+code-interpreter/repo}
for d in "$E2B_GIT_DIR" "$CI_GIT_DIR"; do
  git -C "$d" rev-parse --git-dir >/dev/null 2>&1 || {
    echo "run.sh: $d is not a git clone: set E2B_GIT_DIR (e2b-dev/E2B) and CI_GIT_DIR (e2b-dev/code-interpreter)" >&2
    exit 2
  }
done
CODE_SANDBOXES=${CODE_SANDBOXES:-$repo/bin/code-sandboxes}
[ -x "$CODE_SANDBOXES" ] || { echo "run.sh: no $CODE_SANDBOXES: run make build, or set CODE_SANDBOXES" >&2; exit 2; }
PY_WORK=${PY_WORK:-/tmp/code-sandboxes-e2bpy}
[ "$(id -u)" = 0 ] || { echo "run.sh: serve's local sandboxes need root" >&2; exit 2; }

# Newest SDKs that run on Debian 12's Python packages: e2b after 2.34 imports
# connectrpc and pyqwest, which Debian doesn't package.
E2B_REV=${E2B_REV:-5e141a765ff15135f0aa18ad3de98dce173909d3}   # e2b 2.34.0
CI_REV=${CI_REV:-45f181c972fe4f27d0d3c4391d02ade9732f1fbe}     # e2b-code-interpreter 2.9.0
E2B_VERSION=${E2B_VERSION:-2.34.0}
CI_VERSION=${CI_VERSION:-2.9.0}

# Debian's packages of what the SDKs and the tests import.
debs=(python3 python3-httpx python3-httpcore python3-h2 python3-protobuf python3-typing-extensions
  python3-wcmatch python3-rich python3-dateutil python3-attr python3-packaging python3-pytest
  python3-pytest-asyncio python3-dotenv python3-requests curl)
missing=()
for p in "${debs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "run.sh: installing ${missing[*]}" >&2
  apt-get install -y --no-install-recommends "${missing[@]}" >/dev/null || {
    apt-get update >/dev/null && apt-get install -y --no-install-recommends "${missing[@]}" >/dev/null
  }
fi

# The SDKs' source trees at the pinned commits (kept while the pins hold).
src=$PY_WORK/src
stamp="$E2B_REV $CI_REV"
if [ "$(cat "$src/.revs" 2>/dev/null)" != "$stamp" ]; then
  rm -rf "$src" "$PY_WORK/site"
  mkdir -p "$src/e2b" "$src/ci" "$PY_WORK/site"
  git -C "$E2B_GIT_DIR" archive "$E2B_REV" packages/python-sdk | tar -x -C "$src/e2b"
  git -C "$CI_GIT_DIR" archive "$CI_REV" python | tar -x -C "$src/ci"
  # The SDKs read their own versions through importlib.metadata.
  for nv in "e2b $E2B_VERSION" "e2b_code_interpreter $CI_VERSION"; do
    set -- $nv
    mkdir -p "$PY_WORK/site/$1-$2.dist-info"
    printf 'Metadata-Version: 2.1\nName: %s\nVersion: %s\n' "$1" "$2" >"$PY_WORK/site/$1-$2.dist-info/METADATA"
  done
  echo "$stamp" >"$src/.revs"
fi

results=${PY_RESULTS:-$PY_WORK/results}
rm -rf "$results"
mkdir -p "$results"
runtime=$(mktemp -d "$PY_WORK/runtime.XXXXXX")
key="e2b_$(od -An -N20 -tx1 /dev/urandom | tr -d ' \n')"
port=${PY_PORT:-$((20000 + RANDOM % 20000))}
# --allow-insecure-sandboxes: the tests create every sandbox with secure=False.
# shellcheck disable=SC2086
setsid "$CODE_SANDBOXES" serve --listen "127.0.0.1:$port" --api-key "$key" --runtime-dir "$runtime" \
  --allow-insecure-sandboxes --verbose ${SERVE_ARGS:-} >"$results/serve.out" 2>"$results/serve.err" &
serve_pid=$!
stop_serve() {
  # serve kills its sandboxes on SIGTERM; give it time, then end it.
  kill -TERM "$serve_pid" 2>/dev/null || true
  for _ in $(seq 120); do kill -0 "$serve_pid" 2>/dev/null || break; sleep 0.5; done
  kill -KILL "$serve_pid" 2>/dev/null || true
  wait "$serve_pid" 2>/dev/null || true
  rm -rf "$runtime"
}
trap stop_serve EXIT
up=
for _ in $(seq 120); do
  if curl -fsS -o /dev/null "http://127.0.0.1:$port/health" 2>/dev/null; then up=1; break; fi
  kill -0 "$serve_pid" 2>/dev/null || break
  sleep 0.5
done
[ -n "$up" ] || { echo "run.sh: serve did not come up; see $results/serve.err" >&2; tail -5 "$results/serve.err" >&2; exit 1; }

export PYTHONPATH="$here/shim:$PY_WORK/site:$src/e2b/packages/python-sdk:$src/ci/python"
export E2B_API_KEY=$key E2B_API_URL=http://127.0.0.1:$port E2B_SANDBOX_URL=http://127.0.0.1:$port E2B_DOMAIN=localhost
# E2B_DEBUG would make the tests skip most cases and the SDK dial envd itself.
unset E2B_DEBUG E2B_ACCESS_TOKEN
cd "$src/ci/python"
[ ${#args[@]} -gt 0 ] || args=(tests)
set +e
/usr/bin/python3 -m pytest -o addopts= -p no:cacheprovider --import-mode=importlib -o asyncio_mode=auto \
  --junitxml="$results/junit.xml" -rfEs -q "${args[@]}" >"$results/pytest.log" 2>&1
rc=$?
set -e
tail -40 "$results/pytest.log"
echo "results: $results (pytest.log, junit.xml, serve.err)"
exit $rc

#!/usr/bin/env bash
# Usage: scripts/with-k8s.sh scripts/k8s-smoke.sh IMAGE.tar [IMAGE-REF]
#
# Smoke test of the local cluster (scripts/k8s-cluster.sh) with an image that
# has python3 (e.g. the code-sandboxes environment image): imports IMAGE.tar
# with $CODE_SANDBOXES_K8S_IMPORT, runs a pod from it (imagePullPolicy Never),
# execs into it (output, stdin, exit code, `import numpy`), reaches it through
# kubectl port-forward and from the host by pod IP, deletes it. IMAGE-REF
# defaults to the first RepoTag in the tarball's manifest.json. Prints timings.
set -euo pipefail

[ $# -ge 1 ] || { sed -n '2,/^set -eu/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit 2; }
: "${KUBECONFIG:?not set: run under scripts/with-k8s.sh or eval \"\$(scripts/k8s-cluster.sh env)\"}"
: "${CODE_SANDBOXES_K8S_IMPORT:?not set}"
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
TAR=$1
REF=${2:-$(tar -xOf "$TAR" manifest.json | python3 -c 'import json,sys; print(json.load(sys.stdin)[0]["RepoTags"][0])')}
NS=k8s-smoke
POD=smoke
PORT=18080

kubectl() { "$HERE/k8s-cluster.sh" kubectl "$@"; }
now_ms() { local t; t=$(date +%s%N); echo $((t / 1000000)); }
step() { printf 'k8s-smoke: %-45s %6d ms\n' "$1" $(($(now_ms) - T)); T=$(now_ms); }
fail() { echo "k8s-smoke: FAIL: $*" >&2; kubectl -n "$NS" describe pod "$POD" >&2 || true; exit 1; }

T=$(now_ms)
T0=$T
# shellcheck disable=SC2086 # CODE_SANDBOXES_K8S_IMPORT is a command prefix
$CODE_SANDBOXES_K8S_IMPORT "$TAR"
step "import $(basename "$TAR")"

kubectl create namespace "$NS" >/dev/null
until kubectl -n "$NS" get serviceaccount default >/dev/null 2>&1; do sleep 0.1; done
kubectl -n "$NS" apply -f - >/dev/null <<EOF
apiVersion: v1
kind: Pod
metadata:
  name: $POD
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: main
    image: $REF
    imagePullPolicy: Never
    command: ["python3", "-m", "http.server", "8080"]
    ports:
    - containerPort: 8080
EOF
kubectl -n "$NS" wait --for=condition=Ready "pod/$POD" --timeout=120s >/dev/null || fail "pod not Ready"
step "pod created -> Ready"

out=$(kubectl -n "$NS" exec "$POD" -- python3 -c 'import numpy, pandas, matplotlib, os; print(numpy.__version__, os.getuid(), os.getgid())')
step "exec: import numpy, pandas, matplotlib"
echo "  numpy version, uid, gid: $out"
[ "$(echo hello | kubectl -n "$NS" exec -i "$POD" -- cat)" = hello ] || fail "exec stdin"
step "exec with stdin"
set +e
kubectl -n "$NS" exec "$POD" -- sh -c 'exit 7'
rc=$?
set -e
[ $rc -eq 7 ] || fail "exec exit code: got $rc, want 7"
step "exec exit code 7 propagated"

kubectl -n "$NS" port-forward "pod/$POD" "$PORT:8080" >/tmp/k8s-smoke-pf.log 2>&1 &
pf=$!
for _ in $(seq 100); do curl -sf "http://127.0.0.1:$PORT/" >/dev/null 2>&1 && break; sleep 0.1; done
curl -sf "http://127.0.0.1:$PORT/" | grep -q 'Directory listing' || { cat /tmp/k8s-smoke-pf.log >&2; kill "$pf"; fail "port-forward"; }
kill "$pf"
wait "$pf" 2>/dev/null || true
rm -f /tmp/k8s-smoke-pf.log
step "port-forward $PORT -> pod:8080"

ip=$(kubectl -n "$NS" get pod "$POD" -o 'jsonpath={.status.podIP}')
curl -sf --max-time 5 "http://$ip:8080/" | grep -q 'Directory listing' || fail "host -> pod IP $ip"
step "host -> pod IP $ip:8080"

kubectl -n "$NS" delete pod "$POD" --wait=true --timeout=60s >/dev/null || fail "delete"
step "pod deleted"
kubectl delete namespace "$NS" --wait=false >/dev/null
echo "k8s-smoke: OK in $(($(now_ms) - T0)) ms"

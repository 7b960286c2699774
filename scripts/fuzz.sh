#!/usr/bin/env bash
# Runs every Go native fuzz target in the repository for a bounded time
# each: go test -run '^$' -fuzz '^FuzzXxx$' -fuzztime $FUZZTIME ./pkg, one
# target per invocation (Go fuzzes one target at a time). Targets are found
# with grep, so a new `func FuzzXxx(f *testing.F)` in any _test.go file is
# picked up without editing this script.
#
#   FUZZTIME  time per target (default 10s; any go test -fuzztime value)
#   FUZZJOBS  targets run at once (default 2), each with one worker
#             (-parallel 1): the same CPU as one target with two workers,
#             half the wall time
#   FUZZ      regexp: run only the targets whose "pkg FuzzName" matches
#
# It stops at the first failure, printing the target and the failing input
# that go test wrote (testdata/fuzz/FuzzXxx/<hash> beside the target):
# commit that file with the fix, it is then a regression test run by plain
# go test.
set -euo pipefail
cd "$(dirname "$0")/.."
export CGO_ENABLED=0

FUZZTIME=${FUZZTIME:-10s}
FUZZJOBS=${FUZZJOBS:-2}
FUZZ=${FUZZ:-}

# "pkgdir FuzzName" per target, sorted, vendored and testdata trees skipped.
mapfile -t targets < <(
	grep -rEo --include='*_test.go' '^func Fuzz[A-Za-z0-9_]+\(f \*testing\.F\)' . |
		grep -v -e '/testdata/' -e '/vendor/' |
		sed -E 's#^(.*)/[^/]+_test\.go:func (Fuzz[A-Za-z0-9_]+).*#\1 \2#' |
		sort -u
)
if [[ -n $FUZZ ]]; then
	mapfile -t targets < <(printf '%s\n' "${targets[@]}" | grep -E -- "$FUZZ" || true)
fi
if [[ ${#targets[@]} -eq 0 ]]; then
	echo "fuzz.sh: no fuzz targets found" >&2
	exit 1
fi

logdir=$(mktemp -d)
pids=()
cleanup() {
	for p in "${pids[@]+"${pids[@]}"}"; do
		kill -- "-$p" 2>/dev/null || kill "$p" 2>/dev/null || true
	done
	rm -rf "$logdir"
}
trap cleanup EXIT

start=$SECONDS
declare -A what # pid -> "pkg Fuzz"
declare -A logof

# report prints a failed target's log, the target and its failing input.
report() {
	local t=$1 log=$2
	echo "---- FAIL: $t" >&2
	tail -n 60 "$log" >&2
	local input
	input=$(grep -Eo 'testdata/fuzz/Fuzz[A-Za-z0-9_]+/[0-9a-f]+' "$log" | tail -n 1 || true)
	echo "fuzz.sh: target ${t#* } in ${t%% *} failed" >&2
	if [[ -n $input ]]; then
		echo "fuzz.sh: failing input: ${t%% *}/$input (rerun: go test -run '^${t#* }\$/$(basename "$input")\$' ${t%% *})" >&2
	fi
}

# waitone waits for any running target; on failure it reports and exits.
waitone() {
	local rc=0 p
	wait -n -p p || rc=$?
	local t=${what[$p]} log=${logof[$p]}
	local left=() q
	for q in "${pids[@]}"; do
		[[ $q == "$p" ]] || left+=("$q")
	done
	pids=("${left[@]}")
	if [[ $rc -ne 0 ]] && ! grep -q 'Failing input written' "$log" && grep -q '^    context deadline exceeded' "$log"; then
		# Go 1.26's fuzz coordinator can report its own -fuzztime deadline
		# as a failure, with no input written (go.dev/issue/75804, fixed in
		# 1.27). Then the target's seeds and corpus are run again as plain
		# tests: a real finding fails there.
		if go test -count=1 -run "^${t#* }\$" "${t%% *}" >>"$log" 2>&1; then
			echo "ok   $t (fuzz deadline race, go.dev/issue/75804: seeds and corpus re-run passed)"
			return
		fi
	fi
	if [[ $rc -ne 0 ]]; then
		report "$t" "$log"
		exit 1
	fi
	echo "ok   $t ($(grep -Eo 'elapsed: [0-9a-z]+, execs: [0-9]+' "$log" | tail -n 1 | sed 's/.*execs: /execs /'))"
}

running=0
i=0
for t in "${targets[@]}"; do
	pkg=${t%% *} name=${t#* }
	log="$logdir/$i.log"
	i=$((i + 1))
	# setsid: the target's go test and its workers form one process group,
	# which cleanup can stop as a whole.
	setsid go test -run '^$' -fuzz "^${name}\$" -fuzztime "$FUZZTIME" -parallel 1 "$pkg" >"$log" 2>&1 &
	what[$!]=$t
	logof[$!]=$log
	pids+=("$!")
	running=$((running + 1))
	if [[ $running -ge $FUZZJOBS ]]; then
		waitone
		running=$((running - 1))
	fi
done
while [[ $running -gt 0 ]]; do
	waitone
	running=$((running - 1))
done
echo "fuzz.sh: ${#targets[@]} targets, ${FUZZTIME} each, ${FUZZJOBS} at a time: all passed in $((SECONDS - start)) s"

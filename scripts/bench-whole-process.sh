#!/usr/bin/env bash
# bench-whole-process.sh runs N trivial shell jobs, two at a time, as whole
# processes: `laboro run` (the core Executor, no server) against
# `xargs -P2` and GNU `parallel -j2` with hyperfine, and `laboro run true`
# against `sh -c true` for the start-up. Needs hyperfine and parallel (Debian
# packages of those names). hyperfine runs one command's runs after the
# other's, so a slow phase of a shared machine can favour one; the ratio to
# xargs is then measured again in ROUNDS interleaved rounds (each runs
# `laboro run` and `xargs -P2 sh -c` once, in turn), printed per round and
# as the median with its range.
# Output files go to $TMPDIR (for laboro's state directory).
#
#   scripts/bench-whole-process.sh [N [RUNS [ROUNDS]]]   (defaults: 1000 jobs, 5 runs, 6 rounds)
set -euo pipefail
n=${1:-1000} runs=${2:-5} rounds=${3:-6}
cd "$(dirname "$0")/.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
go build -o "$tmp/laboro" ./jetstream/cmd/laboro
for _ in $(seq "$n"); do echo true; done > "$tmp/jobs"
export LABORO_STATE_DIR=$tmp/state XDG_RUNTIME_DIR=$tmp/run
mkdir -p "$LABORO_STATE_DIR" "$XDG_RUNTIME_DIR"
hyperfine -N --warmup 1 --runs "$runs" --export-markdown "$tmp/jobs.md" \
	-n "laboro run -workers 2" "$tmp/laboro run -workers 2 -f $tmp/jobs" \
	-n "xargs -P2 (sh -c each)" "xargs -P2 -I{} -a $tmp/jobs sh -c {}" \
	-n "xargs -P2 -n1 true (no shell)" "xargs -P2 -n1 -a $tmp/jobs true" \
	-n "parallel -j2" "parallel -j2 -a $tmp/jobs"
cat "$tmp/jobs.md"
hyperfine -N --warmup 3 --runs 30 --export-markdown "$tmp/start.md" \
	-n "laboro run true" "$tmp/laboro run true" -n "sh -c true" "sh -c true"
cat "$tmp/start.md"

# wall prints how long its command took, in milliseconds.
wall() {
	local t0 t1
	t0=$(date +%s%N)
	"$@" > /dev/null 2>&1 || return 1
	t1=$(date +%s%N)
	echo $(((t1 - t0) / 1000000))
}
echo
echo "interleaved rounds of $n jobs: laboro run -workers 2, xargs -P2 sh -c (ms); laboro's rate ÷ xargs's"
for r in $(seq "$rounds"); do
	l=$(wall "$tmp/laboro" run -workers 2 -f "$tmp/jobs")
	x=$(wall xargs -P2 -I{} -a "$tmp/jobs" sh -c {})
	echo "round $r: $l $x $(awk -v l="$l" -v x="$x" 'BEGIN { printf "%.2f", x / l }')"
done | tee "$tmp/rounds"
sort -n -k5 "$tmp/rounds" | awk '{ r[NR] = $5 } END {
	m = NR % 2 ? r[(NR + 1) / 2] : (r[NR / 2] + r[NR / 2 + 1]) / 2
	printf "median %.2f [%.2f–%.2f] over %d rounds\n", m, r[1], r[NR], NR }'

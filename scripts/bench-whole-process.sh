#!/usr/bin/env bash
# bench-whole-process.sh runs N trivial shell jobs, two at a time, as whole
# processes: `laboro run` (the core Executor, no server) against
# `xargs -P2` and GNU `parallel -j2`, in interleaved rounds (hyperfine runs
# each command in turn), and `laboro run true` against `sh -c true` for the
# start-up. Needs hyperfine and parallel (Debian packages of those names).
#
#   scripts/bench-whole-process.sh [N [RUNS]]     (defaults: 1000 jobs, 5 runs)
set -euo pipefail
n=${1:-1000} runs=${2:-5}
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
	-n "xargs -P2 -n1 (no shell)" "xargs -P2 -n1 -a $tmp/jobs" \
	-n "parallel -j2" "parallel -j2 -a $tmp/jobs"
cat "$tmp/jobs.md"
hyperfine -N --warmup 3 --runs 30 --export-markdown "$tmp/start.md" \
	-n "laboro run true" "$tmp/laboro run true" -n "sh -c true" "sh -c true"
cat "$tmp/start.md"

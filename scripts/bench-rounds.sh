#!/usr/bin/env bash
# bench-rounds.sh runs benchmarks of one package in interleaved rounds:
# each round runs every pattern once, each in a process of its own, so that
# the slow and fast phases of a shared machine fall on all of them alike and
# figures of one round can be compared. It prints the benchmark lines, ready
# for benchstat. PKG names the package (the root package by default); DIR,
# if set, is the directory PKG is taken in.
#
#   [PKG=./jetstream] scripts/bench-rounds.sh ROUNDS BENCHTIME PATTERN...
#   scripts/bench-rounds.sh 10 1000x 'Process/^laboro$/^c=1$' 'Process/^os-exec$/^c=1$'
set -euo pipefail
if [ $# -lt 3 ]; then
	sed -n '2,12s/^# \{0,1\}//p' "$0" >&2
	exit 2
fi
rounds=$1 benchtime=$2
shift 2
cd "$(dirname "$0")/.."
cd "${DIR:-.}"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
go test -c -o "$tmp/bench.test" "${PKG:-.}"
for _ in $(seq "$rounds"); do
	for pattern in "$@"; do
		"$tmp/bench.test" -test.run '^$' -test.bench "$pattern" -test.benchtime "$benchtime" | grep '^Benchmark'
	done
done

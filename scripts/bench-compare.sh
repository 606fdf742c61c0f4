#!/usr/bin/env bash
# bench-compare.sh measures two revisions side by side: it builds the test
# binary of one package at revision OLD and at the working tree, then runs,
# in each of ROUNDS rounds, every pattern once with each binary, each in a
# process of its own, old and new one after the other, so that the slow and
# fast phases of a shared machine fall on both alike. It writes the lines of
# each side to OUT/old.txt and OUT/new.txt (ready for benchstat) and prints
# them as they come, each prefixed with its side. PKG and DIR are as for
# bench-rounds.sh.
#
#   [DIR=jetstream] [PKG=./protocols/fuq] scripts/bench-compare.sh OLD OUT ROUNDS BENCHTIME PATTERN...
#   scripts/bench-compare.sh e1afe71 /tmp/cmp 6 200000x 'Overhead/^laboro$/^c=2$' 'Overhead/^floor$/^c=2$'
set -euo pipefail
if [ $# -lt 5 ]; then
	sed -n '2,12s/^# \{0,1\}//p' "$0" >&2
	exit 2
fi
old=$1 out=$2 rounds=$3 benchtime=$4
shift 4
cd "$(dirname "$0")/.."
root=$(pwd)
mkdir -p "$out"
tree=$(mktemp -d)
trap 'git -C "$root" worktree remove --force "$tree" >/dev/null 2>&1 || true; rm -rf "$tree"' EXIT
git worktree add --detach -q "$tree" "$old"
(cd "$tree/${DIR:-.}" && go test -c -o "$out/old.test" "${PKG:-.}")
(cd "$root/${DIR:-.}" && go test -c -o "$out/new.test" "${PKG:-.}")
: >"$out/old.txt"
: >"$out/new.txt"
for _ in $(seq "$rounds"); do
	for pattern in "$@"; do
		for side in old new; do
			# Run where the package's tests run, as go test does.
			(cd "$root/${DIR:-.}/${PKG:-.}" && "$out/$side.test" -test.run '^$' -test.bench "$pattern" -test.benchtime "$benchtime") |
				grep '^Benchmark' | tee -a "$out/$side.txt" | sed "s/^/$side /"
		done
	done
done

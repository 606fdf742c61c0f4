#!/usr/bin/env bash
# runexp.sh runs the reference runexp peers (github.com/rfgiusti/runexp,
# Perl) against our binaries, TRIALS times in each direction:
#
#   1. the reference manager (queueexp) and our runexp-runner;
#   2. our runexp-manager and the reference runner (runexp).
#
# Each trial is a fresh folder of four jobs (one fails by the reference's
# RES:failed rule), a fresh manager and one runner of WORKERS workers (2),
# each bounded by a timeout. A trial passes when both end as they should and
# every job has its result with the right summary. It prints a line per
# failed trial, with the ends of both logs, and a count; it exits 1 if any
# trial failed.
#
#   scripts/interop/runexp.sh REFDIR [TRIALS]
#
# REFDIR is a checkout of rfgiusti/runexp; perl with threads is needed, and
# the reference runner needs /tmp/runexp (created here). RUNNER and MANAGER
# name binaries to test instead of building ours; DIRECTION=1 or 2 runs one
# direction only. QUEUEEXP_FLAGS and RUNEXP_FLAGS are more flags for the
# reference programs: "-v --shownames" and "-v" log each step, and run
# date(1) to do so, before each read: slower readers.
set -uo pipefail
if [ $# -lt 1 ] || [ ! -f "$1/queueexp" ] || [ ! -f "$1/runexp" ]; then
	sed -n '2,21s/^# \{0,1\}//p' "$0" >&2
	exit 2
fi
ref=$(cd "$1" && pwd) trials=${2:-50} workers=${WORKERS:-2}
cd "$(dirname "$0")/../.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if [ -z "${RUNNER:-}" ] || [ -z "${MANAGER:-}" ]; then
	go build -o "$tmp/runexp-runner" ./cmd/runexp-runner || exit 1
	go build -o "$tmp/runexp-manager" ./cmd/runexp-manager || exit 1
fi
runner=${RUNNER:-$tmp/runexp-runner} manager=${MANAGER:-$tmp/runexp-manager}
mkdir -p /tmp/runexp

# folder DIR makes a job folder: three jobs that succeed, one that fails.
folder() {
	mkdir -p "$1/runs/sub"
	printf '#!/bin/bash\necho RES:ok\necho one\n' >"$1/runs/one.sh"
	printf '#!/bin/bash\necho RES:ok\necho two\n' >"$1/runs/sub/two.sh"
	printf '#!/bin/bash\necho three\necho RES:ok\n' >"$1/runs/three.sh"
	printf '#!/bin/bash\necho RES:failed\nexit 3\n' >"$1/runs/sub/bad.sh"
}

# results DIR checks the result files the manager wrote.
results() {
	local name want
	for name in one:success sub/two:success three:success sub/bad:failure; do
		want=${name#*:} name=${name%%:*}
		head -n1 "$1/outputs/$name.res" 2>/dev/null | grep -qx "runexp summary: $want" ||
			{ echo "outputs/$name.res: want runexp summary: $want"; return 1; }
	done
}

# listening PORT waits until something listens on PORT.
listening() {
	for _ in $(seq 200); do
		ss -Hltn "sport = :$1" | grep -q LISTEN && return 0
		sleep 0.05
	done
	return 1
}

# ends PID waits up to 20 s for PID to end and returns its status.
ends() {
	local i
	for i in $(seq 400); do
		kill -0 "$1" 2>/dev/null || { wait "$1"; return; }
		sleep 0.05
	done
	kill "$1" 2>/dev/null
	wait "$1"
	return 124
}

fail() {
	echo "trial $1: $2"
	echo "  manager: $(tail -c 400 "$3/manager.log" 2>/dev/null | tr '\r\n' '  ')"
	echo "  runner:  $(tail -c 400 "$3/runner.log" 2>/dev/null | tr '\r\n' '  ')"
	failed=$((failed + 1))
}

# perlManager N: the reference manager and our runner.
perlManager() {
	local dir=$tmp/m$1 port=$((20000 + RANDOM % 20000)) mpid rc
	folder "$dir"
	perl "$ref/queueexp" ${QUEUEEXP_FLAGS:-} -p "$port" "$dir" >"$dir/manager.log" 2>&1 &
	mpid=$!
	listening "$port" || { kill $mpid; fail "$1" "the reference manager did not listen" "$dir"; return; }
	timeout -k 2 15 "$runner" "$workers" -c "127.0.0.1:$port" -h ourrunner >"$dir/runner.log" 2>&1
	rc=$?
	ends $mpid
	local mrc=$?
	[ $rc -eq 0 ] || { fail "$1" "our runner exited $rc" "$dir"; return; }
	[ $mrc -eq 0 ] && grep -q 'Done!' "$dir/manager.log" || { fail "$1" "the reference manager exited $mrc" "$dir"; return; }
	results "$dir" >"$dir/check" || fail "$1" "$(cat "$dir/check")" "$dir"
}

# perlRunner N: our manager and the reference runner.
perlRunner() {
	local dir=$tmp/r$1 port=$((20000 + RANDOM % 20000)) mpid rc
	folder "$dir"
	"$manager" -p "$port" --listen 127.0.0.1 "$dir" >"$dir/manager.log" 2>&1 &
	mpid=$!
	listening "$port" || { kill $mpid; fail "$1" "our manager did not listen" "$dir"; return; }
	timeout -k 2 15 perl "$ref/runexp" ${RUNEXP_FLAGS:-} "$workers" -c "127.0.0.1:$port" -h perlrunner >"$dir/runner.log" 2>&1
	rc=$?
	ends $mpid
	local mrc=$?
	[ $rc -eq 0 ] && grep -q 'Done!' "$dir/runner.log" || { fail "$1" "the reference runner exited $rc" "$dir"; return; }
	# 1: one job failed, as it should.
	[ $mrc -eq 1 ] || { fail "$1" "our manager exited $mrc, want 1 (one job fails)" "$dir"; return; }
	results "$dir" >"$dir/check" || fail "$1" "$(cat "$dir/check")" "$dir"
}

status=0
for direction in 1 2; do
	[ -n "${DIRECTION:-}" ] && [ "$DIRECTION" != $direction ] && continue
	failed=0
	start=$SECONDS
	for i in $(seq "$trials"); do
		if [ $direction = 1 ]; then perlManager "$i"; else perlRunner "$i"; fi
	done
	case $direction in
	1) what="reference manager, our runner" ;;
	2) what="our manager, reference runner" ;;
	esac
	echo "$what: $((trials - failed))/$trials trials passed ($((SECONDS - start)) s)"
	[ $failed -eq 0 ] || status=1
done
exit $status

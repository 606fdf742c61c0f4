#!/usr/bin/env bash
# Runs laboro's pulse-controller and pulse-worker against the reference
# implementation of the controller/worker protocol (a Go controller and a
# C++ worker), in both numberings and both directions, and says what each
# run showed.
#
#   scripts/interop/pulse.sh REPO [WORK]
#
# REPO is a git repository (a clone or a bare mirror) of the reference;
# WORK a scratch directory (a new temporary one by default). The reference
# is built in WORK, never in this repository: its HEAD speaks the later
# numbering, its commit d6e222d the spec's; HEAD's communication.pb.go is
# taken from commit 097033e. Its socket directory, hard-coded as
# /run/controller/, is patched to a short temporary one. Needs g++, protoc,
# Debian's libprotobuf-dev, libspdlog-dev, prometheus-cpp-dev and
# libcurl4-openssl-dev, openssl and go. The C++ worker pushes metrics to
# METRICS_GATEWAY_ADDRESS:METRICS_GATEWAY_PORT; a closed port on the
# loopback is used (it logs that the push failed).
#
# Exit status: 0 when every run showed what it should, 1 otherwise.
set -uo pipefail

if [ $# -lt 1 ]; then
	echo "usage: $0 REPO [WORK]" >&2
	exit 2
fi
REPO=$(cd "$1" && pwd)
WORK=${2:-$(mktemp -d /tmp/pulse-interop.XXXXXX)}
mkdir -p "$WORK"
WORK=$(cd "$WORK" && pwd)
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
SOCK=$(mktemp -d /tmp/pref.XXXXXX) # short: Unix socket paths are limited
export METRICS_GATEWAY_ADDRESS=127.0.0.1 METRICS_GATEWAY_PORT=9 METRICS_WORKER_NAME=interop
export GOFLAGS=-mod=mod
failures=0
pids=()

git_() {
	if [ -d "$REPO/.git" ]; then git -C "$REPO" "$@"; else git --git-dir="$REPO" "$@"; fi
}
say() { printf '\n=== %s\n' "$*"; }
pass() { echo "PASS: $*"; }
fail() {
	echo "FAIL: $*"
	failures=$((failures + 1))
}
# start runs a command in the background, its output in a file; stop_all
# ends what start started.
start() {
	local log=$1
	shift
	"$@" >"$log" 2>&1 &
	pids+=($!)
}
stop_all() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
	for p in "${pids[@]}"; do wait "$p" 2>/dev/null; done
	pids=()
	rm -rf "${SOCK:?}"/* "$SOCK"/.main-*
}
trap 'stop_all; rm -rf "$SOCK"' EXIT
# await waits up to $1 seconds for a file to contain a pattern.
await() {
	local secs=$1 file=$2 pattern=$3
	for _ in $(seq $((secs * 10))); do
		grep -q -- "$pattern" "$file" 2>/dev/null && return 0
		sleep 0.1
	done
	return 1
}

say "building the reference in $WORK (sockets in $SOCK)"
for v in head:HEAD spec:d6e222d; do
	name=${v%%:*} rev=${v#*:}
	rm -rf "${WORK:?}/$name"
	mkdir -p "$WORK/$name"
	git_ archive "$rev" | tar -x -C "$WORK/$name" || exit 1
	sed -i "s|#define SOCKET_DIR \"/run/controller/\"|#define SOCKET_DIR \"$SOCK/\"|" "$WORK/$name/worker/include/worker.hpp"
	sed -i "s|\"/run/controller/|\"$SOCK/|" "$WORK/$name/controller/internal/manager/manager.go"
done
git_ show 097033e:controller/pkg/proto/communication/communication.pb.go >"$WORK/head/controller/pkg/proto/communication/communication.pb.go"
cxx() { g++ -O1 -std=c++17 "$@" -lprotobuf -lspdlog -lfmt -lprometheus-cpp-push -lprometheus-cpp-core -lcurl -lssl -lcrypto -pthread; }
(
	cd "$WORK/head/worker" && protoc --cpp_out=src communication.proto &&
		cxx -Isrc -Iinclude src/main.cpp src/md_calculator.cpp src/file.cpp src/worker.cpp src/metrics_collector.cpp src/communication.pb.cc -o worker
) 2>"$WORK/build-head-worker.log" || {
	cat "$WORK/build-head-worker.log"
	exit 1
}
(
	# d6e222d's generated C++ needs a newer protobuf: generate it again from
	# the controller's .proto of that commit (the spec's numbering).
	cd "$WORK/spec/worker" && mkdir -p gen && protoc -I../controller/pkg/proto/communication --cpp_out=gen communication.proto &&
		cp gen/communication.pb.h include/communication.pb.hpp &&
		sed 's|#include "communication.pb.h"|#include "../include/communication.pb.hpp"|' gen/communication.pb.cc >src/communication.pb.cpp &&
		cxx -Iinclude src/main.cpp src/md_calculator.cpp src/file.cpp src/worker.cpp src/metrics_collector.cpp src/communication.pb.cpp -o worker
) 2>"$WORK/build-spec-worker.log" || {
	cat "$WORK/build-spec-worker.log"
	exit 1
}
(cd "$WORK/head/controller" && go build -o manager ./cmd/manager) || exit 1
(cd "$WORK/spec/controller" && go build -o manager ./cmd/manager) || exit 1
(cd "$ROOT" && go build -o "$WORK/bin/" ./cmd/pulse-controller ./cmd/pulse-worker) || exit 1
CTL=$WORK/bin/pulse-controller WRK=$WORK/bin/pulse-worker
HEADW=$WORK/head/worker/worker SPECW=$WORK/spec/worker/worker
HEADC=$WORK/head/controller/manager SPECC=$WORK/spec/controller/manager

# tasks writes n random files of growing sizes in $1.
tasks() {
	rm -rf "$1"
	mkdir -p "$1"
	local i
	for i in $(seq "$2"); do head -c $((i * i * 100000 + 7)) /dev/urandom >"$1/t$i"; done
}
# correct counts the results in $2 that are the MD5 of the task of the
# same name in $1: 16 raw bytes (HEAD), or 32 hex digits (d6e222d).
correct() {
	local n=0 f r
	for f in "$1"/*; do
		r=$2/$(basename "$f")
		[ -f "$r" ] || continue
		if openssl dgst -md5 -binary <"$f" | cmp -s - "$r" ||
			[ "$(openssl dgst -md5 -r <"$f" | cut -c1-32)" = "$(cat "$r")" ]; then
			n=$((n + 1))
		fi
	done
	echo $n
}

say "our controller (-later) with two reference workers of HEAD (later numbering): 4 tasks"
tasks "$WORK/in-a" 4
rm -rf "$WORK/out-a"
start "$WORK/a-controller.log" timeout 120 "$CTL" -dir "$SOCK" -later -in "$WORK/in-a" -out "$WORK/out-a"
await 10 "$WORK/a-controller.log" serving
start "$WORK/a-worker1.log" "$HEADW"
start "$WORK/a-worker2.log" "$HEADW"
wait "${pids[0]}"
rc=$?
n=$(correct "$WORK/in-a" "$WORK/out-a")
[ "$rc" = 0 ] && [ "$n" = 4 ] && pass "exit $rc, $n of 4 results are the MD5 of their task" ||
	fail "exit $rc, $n of 4 results correct (see $WORK/a-*.log)"
stop_all

say "our controller (spec numbering, -attempts 2) with two reference workers of d6e222d: 3 tasks"
echo "(their first pulse comes 30 to 45 s after they register; each solves one task, then answers BUSY for good;"
echo "their result is the MD5 in 32 hex digits)"
tasks "$WORK/in-b" 3
rm -rf "$WORK/out-b"
start "$WORK/b-controller.log" timeout 150 "$CTL" -dir "$SOCK" -attempts 2 -in "$WORK/in-b" -out "$WORK/out-b"
await 10 "$WORK/b-controller.log" serving
start "$WORK/b-worker1.log" "$SPECW"
start "$WORK/b-worker2.log" "$SPECW"
wait "${pids[0]}"
rc=$?
n=$(correct "$WORK/in-b" "$WORK/out-b")
busy=$(grep -c "the workers stayed busy" "$WORK/b-controller.log")
[ "$rc" = 1 ] && [ "$n" = 2 ] && [ "$busy" -ge 1 ] &&
	pass "exit $rc, $n results correct, the third task failed: $(grep -m1 -o 'transport: job handed out.*' "$WORK/b-controller.log")" ||
	fail "exit $rc, $n results correct, 'the workers stayed busy' logged $busy times (see $WORK/b-*.log)"
stop_all

say "our controller (spec numbering) and a reference worker of HEAD (later numbering)"
start "$WORK/c-controller.log" "$CTL" -dir "$SOCK"
await 10 "$WORK/c-controller.log" serving
timeout 10 "$HEADW" >"$WORK/c-worker.log" 2>&1
echo "their worker: $(grep -m1 -o 'SendPulse: .*' "$WORK/c-worker.log")"
await 5 "$WORK/c-controller.log" "REGISTER in the later numbering" &&
	pass "$(grep -m1 -o '"pulse".*' "$WORK/c-controller.log")" || fail "no hint logged (see $WORK/c-controller.log)"
stop_all

say "our controller (-later) and a reference worker of d6e222d (spec numbering)"
start "$WORK/d-controller.log" "$CTL" -dir "$SOCK" -later
await 10 "$WORK/d-controller.log" serving
timeout 10 "$SPECW" >"$WORK/d-worker.log" 2>&1
echo "their worker: $(grep -m1 -o 'Pulse failed: .*' "$WORK/d-worker.log")"
await 5 "$WORK/d-controller.log" "REGISTER in the spec numbering" &&
	pass "$(grep -m1 -o '"pulse".*' "$WORK/d-controller.log")" || fail "no hint logged (see $WORK/d-controller.log)"
stop_all

say "the reference controller of HEAD (later numbering; 5 tasks up to 53 MiB, MD5s checked) and our pulse-worker -later"
start "$WORK/e-controller.log" timeout 120 "$HEADC"
mpid=${pids[-1]}
await 10 "$WORK/e-controller.log" "Listening on main.sock"
start "$WORK/e-worker.log" "$WRK" -dir "$SOCK" -later -- openssl dgst -md5 -binary
wait "$mpid"
rc=$?
solved=$(grep -c "Task [0-9]* solved" "$WORK/e-controller.log")
[ "$rc" = 0 ] && [ "$solved" = 5 ] && pass "their controller exits $rc: $solved tasks solved, every MD5 right" ||
	fail "their controller exits $rc, $solved tasks solved (see $WORK/e-*.log)"
stop_all

say "the reference controller of HEAD (later numbering) and our pulse-worker in the spec numbering"
start "$WORK/f-controller.log" timeout 30 "$HEADC"
await 10 "$WORK/f-controller.log" "Listening on main.sock"
start "$WORK/f-worker.log" "$WRK" -dir "$SOCK" -- openssl dgst -md5 -binary
await 10 "$WORK/f-worker.log" "makes sense only in the other numbering" &&
	pass "our worker: $(grep -m1 -o '"answer".*' "$WORK/f-worker.log")" || fail "no hint logged (see $WORK/f-worker.log)"
stop_all

say "the reference controller of d6e222d (spec numbering; 5 tasks) and our pulse-worker for 20 s"
start "$WORK/g-controller.log" timeout 20 "$SPECC"
mpid=${pids[-1]}
await 10 "$WORK/g-controller.log" "Ready to receive"
start "$WORK/g-worker.log" "$WRK" -dir "$SOCK" -- openssl dgst -md5 -binary
wait "$mpid"
echo "their controller: $(grep -c 'Recieved PULSE_REGISTER' "$WORK/g-controller.log") REGISTER, $(grep -c 'Recieved PULSE_FETCH_ME' "$WORK/g-controller.log") FETCH_ME, $(grep -c 'Terminating worker' "$WORK/g-controller.log") workers terminated"
echo "our worker: $(grep -cP '\tregistered\t' "$WORK/g-worker.log") registrations, $(grep -c 'task fetched' "$WORK/g-worker.log") tasks fetched"
stop_all

echo
[ "$failures" = 0 ] && echo "every run showed what it should" || echo "$failures runs failed"
[ "$failures" = 0 ]

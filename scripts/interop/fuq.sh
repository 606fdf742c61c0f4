#!/usr/bin/env bash
# Runs laboro's fuq-foreman and fuq-worker against the reference fuq
# (github.com/sfstewman/fuq), both ways, over HTTPS and a websocket:
#
#   A. the reference foreman (fuqsrv -f) with our worker (fuq-worker -foreman):
#      a job of 5 tasks, a job cancelled while its tasks run, STOP (fuqcli wstop);
#   B. our foreman (fuq-foreman -web) with the reference's workers (fuqsrv -dispatch):
#      a job of 4 tasks on a worker of one processor (it answers ERROR(no procs)
#      after each task), a job cancelled while its task runs, a job of 20 tasks on a
#      worker of two processors (each task runs once), and the worker coming back
#      after our foreman restarts.
#
#   scripts/interop/fuq.sh REFERENCE_CHECKOUT
#
# REFERENCE_CHECKOUT is a copy of the reference's source. Its HEAD does not build
# as it is: the script adds the one-line file it lacks (srv/tasklogger_local.go,
# "type TaskLogger interface{}"), a go.mod, and gopkg.in/vmihailenco/msgpack.v2
# v2.9.2, in that copy. It needs go and openssl; it prints what it checks and
# exits 0 when every check passed. Ports: FUQ_PORT_A, FUQ_PORT_B (7790, 7791).
set -euo pipefail

ref=$(cd "${1:?usage: $0 REFERENCE_CHECKOUT}" && pwd)
repo=$(cd "$(dirname "$0")/../.." && pwd)
port_a=${FUQ_PORT_A:-7790}
port_b=${FUQ_PORT_B:-7791}
work=$(mktemp -d)
# The foreman's journal (and any token) in this run's own state directory:
# jobs left in the user's journal by an earlier run would be resumed, and
# take the job ids this script names.
export LABORO_STATE_DIR="$work/state"
pids=()
failed=0
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	echo "logs and files: $work"
}
trap cleanup EXIT

say() { printf '== %s\n' "$*"; }
check() { # check DESCRIPTION COMMAND...
	if "${@:2}"; then printf 'ok   %s\n' "$1"; else printf 'FAIL %s\n' "$1"; failed=1; fi
}
# until_true SECONDS COMMAND...: polls COMMAND every 0.1 s
until_true() {
	local end=$((SECONDS + $1))
	shift
	until "$@"; do
		((SECONDS < end)) || return 1
		sleep 0.1
	done
}
count() { find "$1" -maxdepth 1 -name "$2" | wc -l; }
files() { test "$(count "$1" "$2")" -eq "$3"; }        # files DIR PATTERN N: N files match
logged() { test "$(grep -cP "\t$2\t" "$1")" -ge "$3"; } # logged LOG MESSAGE N: at least N times
start() { # start LOG COMMAND...: runs COMMAND in the background
	local log=$1
	shift
	"$@" >"$log" 2>&1 &
	pids+=($!)
	last=$!
}

say "building the reference in $ref"
(
	cd "$ref"
	[ -f srv/tasklogger_local.go ] || printf 'package srv\n\ntype TaskLogger interface{}\n' >srv/tasklogger_local.go
	[ -f go.mod ] || go mod init github.com/sfstewman/fuq >/dev/null 2>&1
	go get gopkg.in/vmihailenco/msgpack.v2@v2.9.2 >/dev/null 2>&1
	go mod tidy >/dev/null 2>&1
	go build -o "$work/bin/" ./cmd/fuqsrv ./cmd/fuqcli
)
say "building laboro's fuq-foreman and fuq-worker"
(cd "$repo" && go build -o "$work/bin/" ./cmd/fuq-foreman ./cmd/fuq-worker)
bin=$work/bin

say "a CA and a certificate for localhost"
mkdir -p "$work/pki"
(
	cd "$work/pki"
	openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out root.crt -days 2 -subj "/CN=fuq interop CA" 2>/dev/null
	openssl req -newkey rsa:2048 -nodes -keyout fuq.key -out fuq.csr -subj "/CN=localhost" 2>/dev/null
	printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\n' >ext.cnf
	openssl x509 -req -in fuq.csr -CA root.crt -CAkey ca.key -CAcreateserial -out fuq.crt -days 2 -extfile ext.cnf 2>/dev/null
)
pki=$work/pki

task_script() { # task_script FILE SECONDS: a task that notes its pid and sleeps
	printf '#!/bin/sh\necho "task $1 pid $$"\necho $$ > "$(dirname "$0")/pid-$1"\nexec sleep %s\n' "$2" >"$1"
	chmod +x "$1"
}
all_gone() { # all_gone DIR: every pid-* of DIR names a process that has ended
	local f
	for f in "$1"/pid-*; do
		[ -e "$f" ] || continue
		kill -0 "$(cat "$f")" 2>/dev/null && return 1
	done
	return 0
}

# --- A: the reference foreman, our worker ---------------------------------
say "A: the reference foreman (fuqsrv -f) on port $port_a, our worker"
a=$work/a
mkdir -p "$a/jobs" "$a/long"
cat >"$a/fuq.conf" <<EOF
foreman localhost
keyfile $pki/fuq.key
certfile $pki/fuq.crt
rootca $pki/root.crt
certname localhost
EOF
start "$a/fuqsrv.log" "$bin/fuqsrv" -f -np 1 -srv "$a/fuqsrv.conf" -cfg "$a/fuq.conf" -port "$port_a" -db "$a/queue.db" -log "$a/logs"
until_true 20 grep -q '^auth ' "$a/fuqsrv.conf" 2>/dev/null
cli=("$bin/fuqcli" -srv "$a/fuqsrv.conf" -cfg "$a/fuq.conf")
start "$a/worker.log" "$bin/fuq-worker" -foreman "https://localhost:$port_a" -ca "$pki/root.crt" -auth-file "$a/fuqsrv.conf" \
	-np 2 -spool "$a/spool" -log debug
worker_a=$last
check "A: our worker logs in and says HELLO" until_true 20 logged "$a/worker.log" connected 1

task_script "$a/jobs/t.sh" 0.2
(cd "$a/jobs" && "${cli[@]}" queue -n 5 -log "$a/jobs" five "$a/jobs/t.sh" >/dev/null)
check "A: a job of 5 tasks runs, one log each" until_true 30 files "$a/jobs" 'five_*.log' 5
check "A: ... and no task twice" files "$a/jobs" 'five_*-*.log' 0
check "A: ... each reported done to the foreman" until_true 10 bash -c "${cli[*]} status -status finished -l | grep -q 'Finished: 5'"

task_script "$a/long/t.sh" 300
(cd "$a/long" && "${cli[@]}" queue -n 3 -log "$a/long" long "$a/long/t.sh" >/dev/null)
check "A: two tasks of a long job run" until_true 20 files "$a/long" 'pid-*' 2
"${cli[@]}" cancel 2 >/dev/null # the second job of a new queue
check "A: fuqcli cancel kills them on our worker" until_true 20 all_gone "$a/long"

"${cli[@]}" wstop -a >/dev/null
check "A: fuqcli wstop stops our worker, status 0" until_true 20 bash -c "! kill -0 $worker_a 2>/dev/null"
wait "$worker_a" && st=0 || st=$?
check "A: ... (exit status $st)" test "$st" -eq 0

# --- B: our foreman, the reference's workers -------------------------------
say "B: our foreman (fuq-foreman -web) on port $port_b, the reference's workers"
b=$work/b
mkdir -p "$b/four" "$b/long" "$b/twenty" "$b/logs"
cat >"$b/fuqsrv.conf" <<EOF
foreman localhost
port $port_b
logdir $b/logs
dbpath $b/queue.db
auth interop-$(head -c 18 /dev/urandom | base64 | tr -d '/+=')
certname localhost
EOF
cp "$a/fuq.conf" "$b/fuq.conf"
control=$b/control.sock
foreman() {
	start "$b/foreman-$1.log" "$bin/fuq-foreman" -listen 127.0.0.1:0 -web ":$port_b" -tls-cert "$pki/fuq.crt" \
		-tls-key "$pki/fuq.key" -auth-file "$b/fuqsrv.conf" -control "$control" -log debug
	foreman_pid=$last
	until_true 20 logged "$b/foreman-$1.log" serving 1
}
foreman 1
start "$b/ref-np1.log" "$bin/fuqsrv" -dispatch -np 1 -srv "$b/fuqsrv.conf" -cfg "$b/fuq.conf"
ref1=$last
check "B: a reference worker of 1 processor joins" until_true 20 logged "$b/foreman-1.log" "worker joined" 1

task_script "$b/four/t.sh" 0.3
check "B: a job of 4 tasks succeeds" bash -c "'$bin/fuq-foreman' submit -control '$control' -wait -name four -command '$b/four/t.sh' \
	-tasks 4 -wd '$b/four' -logdir '$b/four' | grep -q 'succeeded'"
check "B: ... one log each" files "$b/four" 'four_*.log' 4
check "B: ... no task twice" files "$b/four" 'four_*-*.log' 0
printf '     ERROR(no procs) answers seen (the worker refuses the JOB that follows an UPDATE): %s\n' \
	"$(grep -c '"type": "ERROR"' "$b/foreman-1.log" || true)"

task_script "$b/long/t.sh" 300
"$bin/fuq-foreman" submit -control "$control" -name long -command "$b/long/t.sh" -tasks 2 -wd "$b/long" -logdir "$b/long" >/dev/null
check "B: a task of a long job runs" until_true 20 files "$b/long" 'pid-*' 1
"$bin/fuq-foreman" cancel -control "$control" job_2 >/dev/null
check "B: fuq-foreman cancel kills it on the reference worker" until_true 20 all_gone "$b/long"
check "B: ... the job ends cancelled" until_true 10 bash -c "'$bin/fuq-foreman' status -control '$control' job_2 | grep -q cancelled"
kill "$ref1"

start "$b/ref-np2.log" "$bin/fuqsrv" -dispatch -np 2 -srv "$b/fuqsrv.conf" -cfg "$b/fuq.conf"
check "B: a reference worker of 2 processors joins" until_true 20 logged "$b/foreman-1.log" "worker joined" 2
task_script "$b/twenty/t.sh" 0.2
check "B: a job of 20 tasks succeeds" bash -c "'$bin/fuq-foreman' submit -control '$control' -wait -name twenty -command '$b/twenty/t.sh' \
	-tasks 20 -wd '$b/twenty' -logdir '$b/twenty' | grep -q 'succeeded'"
check "B: ... one log each" files "$b/twenty" 'twenty_*.log' 20
check "B: ... no task twice" files "$b/twenty" 'twenty_*-*.log' 0

kill "$foreman_pid"
wait "$foreman_pid" 2>/dev/null || true
foreman 2
check "B: the reference worker comes back to our restarted foreman (same cookie)" \
	until_true 30 logged "$b/foreman-2.log" "worker joined" 1
check "B: ... and runs a job" bash -c "'$bin/fuq-foreman' submit -control '$control' -wait -name again -command /bin/true \
	-tasks 2 -wd '$b' -logdir '$b/logs' | grep -q 'succeeded'"

if ((failed)); then
	say "some checks failed"
	exit 1
fi
say "every check passed"

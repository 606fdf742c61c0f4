#!/usr/bin/env bash
# Runs the reference worker of the worker–master system, worker-server 0.9.2
# (Node, github.com/overlookmotel/worker-server), against our
# workerserver-master, as a user would, and checks what a user sees:
#
#   1. jobs with ids the master picks run to Done (a worker module with a
#      numeric `version: 2` comes Online);
#   2. the master is killed while a job runs; the job's Done waits in the
#      worker's file cache (<jobId>.json), and reaches the restarted master
#      when the worker reconnects (Reconnecting, the cache, Online "{}");
#   3. after that reconnection, the worker still gets jobs for its codes
#      only: a job for a code it never offered is not handed to it, and
#      status says that no worker offers it;
#   4. a job is cancelled while its worker is down (killed with SIGKILL);
#      the worker is started again: the job ends Cancelled and is never
#      handed out again;
#   5. the master is restarted keeping only the last 2 ended jobs
#      (-keep-ended 2): the worker, killed, finds in its cache the end of a
#      job the master forgot; started again, it sends it, is answered with
#      success (its cache drains) and comes Online to run new jobs.
#
# Usage: scripts/interop/workerserver.sh REFERENCE_DIR [WORK_DIR]
#
# REFERENCE_DIR is a checkout of the reference with its dependencies
# installed (npm install --omit=dev). The worker app (its driver and worker
# modules) is written to WORK_DIR (a temporary directory by default); it
# holds the logs afterwards. Needs node, go and curl.
set -euo pipefail

ref=$(cd "${1:?usage: $0 REFERENCE_DIR [WORK_DIR]}" && pwd)
work=${2:-$(mktemp -d)}
mkdir -p "$work"
work=$(cd "$work" && pwd)
root=$(cd "$(dirname "$0")/../.." && pwd)
port=${PORT:-18321}
url=http://127.0.0.1:$port

(cd "$root" && go build -o "$work/bin/" ./cmd/workerserver-master)
master=$work/bin/workerserver-master

# The worker app: a driver, two worker modules, its cache and log folders.
app=$work/app
mkdir -p "$app/workers" "$app/jobs" "$app/log"
echo '{"name": "interop-app", "version": "1.0.0", "private": true}' >"$app/package.json"
cat >"$app/driver.js" <<'EOF'
// node driver.js MASTER_URL SERVER_ID PASSWORD
const Server = require(process.env.WS_REF);
const [host, serverId, password] = process.argv.slice(2);
new Server({
	paths: {root: __dirname},
	serverId, password,
	master: {host, paths: {
		serverStatus: '/api/servers/status/:serverId',
		jobStatus: '/api/jobs/status/:jobId',
		ping: '/api/servers/ping/:serverId'
	}},
	jobInterval: 300, messageInterval: 1000, connectInterval: 500
}).start();
EOF
cat >"$app/workers/sum.js" <<'EOF'
module.exports = {version: '1.0.0', run: job => ({sum: (job.params.a || 0) + (job.params.b || 0)})};
EOF
cat >"$app/workers/echo.js" <<'EOF'
// Waits params.ms (reporting progress), then gives its params back. A
// numeric version, as modules often have.
module.exports = {
	version: 2,
	run: job => new Promise(resolve => {
		const ms = job.params.ms || 0;
		job.progressed(0, 2);
		setTimeout(() => {
			job.progressed(1, 2);
			setTimeout(() => resolve({got: job.params}), ms / 2);
		}, ms / 2);
	})
};
EOF
echo "n1 pw-n1" >"$work/servers"
chmod 600 "$work/servers" # the master refuses a file of passwords others may read

pids=()
cleanup() {
	for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
}
trap cleanup EXIT

fail() {
	echo "FAIL: $*" >&2
	echo "--- master log (tail):" >&2
	tail -n 20 "$work"/master-*.log >&2 || true
	exit 1
}

# until SECONDS CMD...: runs CMD every 0.1 s until it succeeds.
until_ok() {
	local end=$((SECONDS + $1))
	shift
	until "$@" >/dev/null 2>&1; do
		((SECONDS < end)) || return 1
		sleep 0.1
	done
}

# The master's API token lives in this run's state directory; curl sends it.
export LABORO_STATE_DIR=$work/state
api() { curl -sf -H "Authorization: Bearer $(cat "$LABORO_STATE_DIR/workerserver-api.token" 2>/dev/null)" "$@"; }

masters=0
start_master() {
	masters=$((masters + 1))
	"$master" serve -listen "127.0.0.1:$port" -db "$work/table.db" -servers "$work/servers" -lease 30s "$@" \
		>"$work/master-$masters.log" 2>&1 &
	master_pid=$!
	pids+=("$master_pid")
	until_ok 20 api "$url/api/jobs" || fail "the master did not start"
}

workers=0
start_worker() {
	workers=$((workers + 1))
	WS_REF=$ref node "$app/driver.js" "$url" n1 pw-n1 >"$work/worker-$workers.log" 2>&1 &
	worker_pid=$!
	pids+=("$worker_pid")
}

status_of() { "$master" status -url "$url" "$1" | cut -f3; }
is_status() { [ "$(status_of "$1")" = "$2" ]; }
server_online() { api "$url/api/servers/n1" | grep -q '"status":"Online"'; }

echo "== 1. jobs with master-chosen ids run to Done"
start_master
start_worker
until_ok 20 server_online || fail "the reference worker never came Online"
# With -wait, submit prints the result on stdout and "job ID" on stderr.
out=$("$master" submit -url "$url" -worker sum -params '{"a": 2, "b": 3}' -wait 2>"$work/submit.err") || fail "sum: $out"
[ "$out" = '{"sum":5}' ] || fail "sum: $out"
id1=$(sed -n 's/^job \([0-9][0-9]*\)$/\1/p' "$work/submit.err")
[ -n "$id1" ] || fail "no job id on submit's standard error: $(cat "$work/submit.err")"
echo "job $id1 (sum): Done, $out"
out=$("$master" submit -url "$url" -worker echo -params '{"ms": 200}' -wait 2>"$work/submit.err") || fail "echo: $out"
echo "job $(sed -n 's/^job //p' "$work/submit.err") (echo, a module with version: 2): Done, $out"

echo "== 2. the master killed mid-job; the job's Done crosses the restart in the worker's cache"
id2=$("$master" submit -url "$url" -worker echo -params '{"ms": 3000}')
until_ok 10 is_status "$id2" Processing || fail "job $id2 never Processing"
{ kill -9 "$master_pid" && wait "$master_pid"; } 2>/dev/null || true
until_ok 20 grep -q '"status":"Done"' "$app/jobs/$id2.json" || fail "no Done in $id2.json in the worker's cache"
echo "the worker cached job $id2's end while the master was away: $(cat "$app/jobs/$id2.json")"
start_master
until_ok 20 is_status "$id2" Done || fail "job $id2 is $(status_of "$id2") after the master's restart"
until_ok 10 test ! -e "$app/jobs/$id2.json" || fail "$id2.json is still in the cache"
grep -q '"status":"Reconnecting"' <(api "$url/api/servers/n1") || fail "the worker did not say Reconnecting"
echo "job $id2: Done after the restart; the worker reconnected and its cache is empty"
id3=$("$master" submit -url "$url" -worker sum -params '{}')
[ "$id3" != "$id1" ] && [ "$id3" != "$id2" ] || fail "id $id3 picked again after the restart"
until_ok 20 is_status "$id3" Done || fail "job $id3 is $(status_of "$id3")"
echo "job $id3: a new id after the restart, Done"

echo "== 3. after the reconnection, jobs for its codes only"
id4=$("$master" submit -url "$url" -worker resize -params '{}')
id5=$("$master" submit -url "$url" -worker sum -params '{"a": 1}')
until_ok 20 is_status "$id5" Done || fail "job $id5 is $(status_of "$id5")"
line=$("$master" status -url "$url" "$id4")
echo "$line" | grep -q 'Queued.*no worker offers "resize"' || fail "status of $id4: $line"
echo "status: $line"
"$master" cancel -url "$url" "$id4"
is_status "$id4" Cancelled || fail "job $id4 is $(status_of "$id4")"
kill -0 "$worker_pid" || fail "the reference worker died"
echo "job $id5 (sum) Done; job $id4 (resize) never handed out, cancelled; the worker is alive"

echo "== 4. a job cancelled while its worker is down"
id6=$("$master" submit -url "$url" -worker echo -params '{"ms": 60000}')
until_ok 10 is_status "$id6" Processing || fail "job $id6 never Processing"
{ kill -9 "$worker_pid" && wait "$worker_pid"; } 2>/dev/null || true
"$master" cancel -url "$url" "$id6"
line=$("$master" status -url "$url" "$id6")
echo "cancelled while the worker is down: $line"
start_worker
until_ok 20 is_status "$id6" Cancelled || fail "job $id6 is $(status_of "$id6") after the worker's restart"
id7=$("$master" submit -url "$url" -worker sum -params '{"a": 7}')
until_ok 20 is_status "$id7" Done || fail "job $id7 is $(status_of "$id7")"
grep -q "\"jobId\":\"$id6\"" "$work/worker-$workers.log" && fail "the new worker process was handed job $id6"
echo "job $id6: Cancelled when the worker came back, never handed to it again; job $id7 Done after it"

echo "== 5. a cached status for a job the master forgot"
{ kill -9 "$worker_pid" && wait "$worker_pid"; } 2>/dev/null || true
{ kill "$master_pid" && wait "$master_pid"; } 2>/dev/null || true
start_master -keep-ended 2
"$master" status -url "$url" "$id1" >/dev/null 2>&1 && fail "job $id1 is still in the table"
grep -q 'forgot the jobs that ended first' "$work/master-$masters.log" || fail "the master did not say it forgot jobs"
echo "the master keeps the last 2 ended jobs: job $id1 is forgotten"
printf '{"status":"Done","data":{"sum":5}}' >"$app/jobs/$id1.json"
start_worker
until_ok 20 test ! -e "$app/jobs/$id1.json" || fail "the worker's cache still holds $id1.json: its status was refused"
id8=$("$master" submit -url "$url" -worker sum -params '{"a": 8}')
until_ok 20 is_status "$id8" Done || fail "job $id8 is $(status_of "$id8"): the worker did not come back"
grep -q 'a status for a job the table does not have' "$work/master-$masters.log" || fail "the master did not log the status of job $id1"
echo "the worker's cached end of job $id1 was answered, its cache drained; job $id8 Done after it"

echo "== all jobs"
"$master" status -url "$url"
echo "PASS (logs in $work)"

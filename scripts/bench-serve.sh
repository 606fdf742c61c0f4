#!/usr/bin/env bash
# bench-serve.sh runs N trivial jobs (`true`) through `laboro serve` (its
# embedded NATS server, no local slots) and W `laboro worker -c C` on this
# machine, submitted as one batch with `laboro submit -wait`, and prints the
# wall time from submit to the last result, the jobs per second, the peak
# RSS of serve, of the workers and of the submitting client, and the disk
# the server's data directory uses at the end. With W 0, serve runs the
# jobs itself, C at a time (`serve -workers C`), as on one machine.
#
#   scripts/bench-serve.sh [N [W [C]]]     (defaults: 100000 jobs, 1 worker of 4 slots)
#
# LABORO=path runs that binary instead of building this checkout's.
set -euo pipefail
n=${1:-100000}
nworkers=${2:-1}
slots=${3:-4}
cd "$(dirname "$0")/.."
tmp=$(mktemp -d)
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	rm -rf "$tmp"
}
trap cleanup EXIT
if [ -n "${LABORO:-}" ]; then
	cp "$LABORO" "$tmp/laboro"
else
	go build -o "$tmp/laboro" ./jetstream/cmd/laboro
fi
local=0
((nworkers > 0)) || local=$slots
awk -v n="$n" 'BEGIN { for (i = 0; i < n; i++) print "true" }' > "$tmp/jobs"
export LABORO_STATE_DIR=$tmp/state XDG_RUNTIME_DIR=$tmp/run
mkdir -p "$LABORO_STATE_DIR" "$XDG_RUNTIME_DIR" "$tmp/out-serve"
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
nats=nats://127.0.0.1:$port
"$tmp/laboro" serve -data "$tmp/data" -listen "127.0.0.1:$port" -workers "$local" -dir "$tmp/out-serve" 2> "$tmp/serve.log" &
serve=$!
pids+=("$serve")
until "$tmp/laboro" status -nats "$nats" > /dev/null 2>&1; do
	kill -0 "$serve" 2>/dev/null || { cat "$tmp/serve.log"; exit 1; }
	sleep 0.2
done
workers=()
for ((i = 0; i < nworkers; i++)); do
	mkdir -p "$tmp/out$i"
	"$tmp/laboro" worker -nats "$nats" -c "$slots" -dir "$tmp/out$i" 2> "$tmp/worker$i.log" &
	workers+=($!)
	pids+=($!)
done
start=$(date +%s.%N)
# Its peak RSS is read from the kernel's account of the children of a
# small wrapper, once it has ended.
python3 -c 'import resource, subprocess, sys
code = subprocess.run(sys.argv[2:]).returncode
open(sys.argv[1], "w").write("%d" % resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
sys.exit(code)' "$tmp/submit.rss" \
	"$tmp/laboro" submit -nats "$nats" -batch bench -wait -f "$tmp/jobs" > "$tmp/submit.out" 2> "$tmp/submit.err" || {
	tail -5 "$tmp/submit.out" "$tmp/submit.err"
	exit 1
}
end=$(date +%s.%N)
hwm() { awk '/VmHWM/ { printf "%.0f MiB", $2 / 1024 }' "/proc/$1/status"; }
if ((nworkers > 0)); then
	echo "jobs:          $n, $nworkers worker(s) of $slots slot(s)"
else
	echo "jobs:          $n, serve's own $slots slot(s)"
fi
echo "wall time:     $(echo "$end - $start" | bc) s (submit to the last result)"
echo "jobs/s:        $(echo "$n / ($end - $start)" | bc)"
peaks=$(for w in "${workers[@]}"; do hwm "$w"; echo; done | paste -sd/ | sed 's|/| / |g')
[ -n "$peaks" ] || peaks=none
echo "peak RSS:      serve $(hwm "$serve"), workers $peaks, submit -wait $(awk '{ printf "%.0f MiB", $1 / 1024 }' "$tmp/submit.rss")"
echo "disk:          $(du -sh "$tmp/data" | cut -f1) in the server's data directory"
tail -1 "$tmp/submit.out"

#!/usr/bin/env bash
# Runs the test scripts of a student jobExecutorServer repository against
# laboro's jobExecutorServer and jobCommander.
#
#   scripts/interop/jobexec-student-tests.sh LAYOUT CHECKOUT [BINDIR]
#
# LAYOUT says how the repository's scripts are laid out:
#   stegiks   stegiks/System-Programming-Project-2: tests/*.sh run from tests/
#             as "script PORT", against ../bin/jobCommander; the server is
#             started beforehand, from tests/ (its jobs use ../bin/progDelay)
#   chrysos   DimitrisChrysos/jobExecutorServer-Multithreaded-Network-Job-
#             Scheduler-in-C: tests/*.sh run from the top, reading
#             SERVER_HOST and PORT from tests/server_host.sh; the server is
#             started beforehand, from the top
#   constarc  ConstArc/jobExecutor: tests/*.sh run from the top and start
#             ./bin/jobExecutorServer themselves, with SERVER_NAME and
#             PORT_NUMBER set at their top
# CHECKOUT is an extracted copy of that repository (it is not modified: the
# scripts run in a scratch copy). BINDIR holds laboro's jobExecutorServer
# and jobCommander; without it they are built from this repository.
# Set THEIRS=1 to run the same scripts against the repository's own
# binaries instead, to compare.
#
# In the scratch copy, the repository's binaries are replaced by laboro's
# (its progDelay, a job program, is kept), its host and port settings point
# at a free local port, and "killall progDelay" becomes a kill, by process
# id, of the progDelay processes that this run's server started. Nothing
# else of the scripts changes. Each script runs with a time limit (LIMIT,
# 180 s) and the commanders it leaves in the background are waited for;
# then the server must end by itself within 30 s (every script ends with
# exit). A script's output is in OUT/<script>.out, the server's log in
# OUT/<script>.server, one line per script in OUT/summary. The scripts
# have no expected output: read the outputs (with THEIRS=1 for the
# repository's own behaviour beside ours). The scratch copy is left in
# /tmp for inspection.
set -euo pipefail

layout=${1:?usage: $0 stegiks|chrysos|constarc CHECKOUT [BINDIR]}
checkout=$(cd "${2:?checkout directory required}" && pwd)
bindir=${3:-}
limit=${LIMIT:-180} # seconds for one script
pool=${POOL:-4}     # threadPoolSize for the servers this script starts

here=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d /tmp/jobexec-interop.XXXXXX)
out=${OUT:-$work/out}
mkdir -p "$out"
echo "scratch copy: $work; outputs: $out"

cp -r "$checkout/." "$work/repo"
cd "$work/repo"
mkdir -p bin build errors output valgrind
make >"$out/make.log" 2>&1 || {
	echo "make failed, see $out/make.log"
	exit 1
}
[ -f tests/progDelay.c ] && gcc -o tests/progDelay tests/progDelay.c

if [ -z "${THEIRS:-}" ]; then
	if [ -z "$bindir" ]; then
		bindir=$work/laboro
		(cd "$here" && go build -o "$bindir/" ./cmd/jobExecutorServer ./cmd/jobCommander)
	fi
	cp "$bindir/jobExecutorServer" "$bindir/jobCommander" bin/
fi
server_bin=$work/repo/bin/jobExecutorServer

# kill-progdelay ends the progDelay processes whose parent is a server of
# this run, by their ids.
cat >"$work/kill-progdelay" <<EOF
#!/usr/bin/env bash
for pid in \$(pgrep -x progDelay); do
	parent=\$(ps -o ppid= -p "\$pid" | tr -d ' ')
	[ -n "\$parent" ] && [ "\$(readlink "/proc/\$parent/exe" 2>/dev/null)" = "$server_bin" ] && kill "\$pid"
done
exit 0
EOF
chmod +x "$work/kill-progdelay"

free_port() {
	python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# wait_port waits until something listens on port $1. It reads the
# kernel's socket table rather than connecting: a connection that sends
# nothing brings some of the student servers down.
wait_port() {
	local hex
	hex=$(printf '%04X' "$1")
	for _ in $(seq 100); do
		awk -v p=":$hex" '$2 ~ p"$" && $4 == "0A" { found = 1 } END { exit !found }' /proc/net/tcp /proc/net/tcp6 && return 0
		sleep 0.1
	done
	return 1
}

# server_pids lists this run's server processes.
server_pids() {
	for pid in $(pgrep -x jobExecutorServ || true); do
		[ "$(readlink "/proc/$pid/exe" 2>/dev/null)" = "$server_bin" ] && echo "$pid"
	done
	return 0
}

scripts=$(ls "$PWD"/tests/*.sh | grep -v -e server_host.sh -e run_executor.sh)
summary=()
for script in $scripts; do
	name=$(basename "$script" .sh)
	port=$(free_port)
	sed -i "s|^\(\s*\)killall progDelay|\1$work/kill-progdelay|" "$script"
	case $layout in
	stegiks)
		rundir=$PWD/tests
		args=("$port")
		(cd tests && exec "$server_bin" "$port" 8 "$pool" >"$out/$name.server" 2>&1) &
		wait_port "$port"
		;;
	chrysos)
		rundir=$PWD
		args=()
		printf 'SERVER_HOST="localhost"\nPORT="%s"\n' "$port" >tests/server_host.sh
		"$server_bin" "$port" 8 "$pool" >"$out/$name.server" 2>&1 &
		wait_port "$port"
		;;
	constarc)
		rundir=$PWD
		args=()
		sed -i -e "s|^SERVER_NAME=.*|SERVER_NAME=localhost|" -e "s|^PORT_NUMBER=.*|PORT_NUMBER=$port|" "$script"
		;;
	*)
		echo "unknown layout $layout"
		exit 2
		;;
	esac
	start=$(date +%s)
	# The script is sourced so that a final wait also waits for the
	# commanders it left running in the background.
	status=0
	(cd "$rundir" && timeout "$limit" bash -c '. "$0" "$@"; wait' "./${script#"$rundir"/}" "${args[@]}") \
		>"$out/$name.out" 2>&1 || status=$?
	took=$(($(date +%s) - start))
	[ "$layout" = constarc ] && { cp errors/ServerErrors.log "$out/$name.server" 2>/dev/null || true; }
	ended=yes
	for _ in $(seq 300); do
		[ -z "$(server_pids)" ] && break
		sleep 0.1
	done
	if [ -n "$(server_pids)" ]; then
		ended=no
		for pid in $(server_pids); do kill "$pid"; done
		"$work/kill-progdelay"
	fi
	line="$name: script status $status after ${took}s; server ended after it: $ended"
	if [ "$status" = 124 ]; then
		line="$line (the script hit the ${limit}s limit and was ended with its process group)"
	fi
	echo "$line"
	summary+=("$line")
done
printf '%s\n' "${summary[@]}" >"$out/summary"

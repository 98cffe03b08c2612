#!/usr/bin/env bash
# Runs unmodified perftest through pibgw's libibverbs.so.1 between two processes attached to
# a daemon, and prints each run and the medians:
#
#   bash scripts/bench-perftest.sh [ROUNDS]      (default 3)
#
# Each round runs `ib_write_bw -s 65536 --report_gbits` (BW average, Gbit/s) and
# `ib_send_lat -s 2` (t_min and t_typical, µs), server on pib_1 and client on pib_0. The
# daemon is the attach tests' daemon helper (an in-process fabric serving an attach socket in
# a temporary directory), so no root, network namespace or `pibgw up` is needed; the data
# path is the same as `pibgw up`'s. Needs perftest and what scripts/build-libs.sh needs.
#
# To compare versions (old and new builds alternating, as issue 42 asks for the streaming guard), build the libraries and the attach
# test binary of each (`bash scripts/build-libs.sh DIR`, `go test -c -o BIN ./attach`) and
# name them in BENCH_PAIRS="NAME:BIN:LIBDIR NAME2:BIN2:LIBDIR2": every round runs each in turn.
set -euo pipefail

rounds=${1:-3}
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
for tool in ib_write_bw ib_send_lat; do
	if ! command -v "$tool" >/dev/null; then
		echo "bench-perftest.sh: $tool is missing (Debian: apt-get install perftest)" >&2
		exit 1
	fi
done
work=$(mktemp -d)
daemon_pid=
cleanup() {
	exec 9>&- 2>/dev/null || true
	if [[ -n $daemon_pid ]]; then
		kill "$daemon_pid" 2>/dev/null || true
		wait "$daemon_pid" 2>/dev/null || true
	fi
	rm -rf "$work"
}
trap cleanup EXIT

pairs=${BENCH_PAIRS:-}
if [[ -z $pairs ]]; then
	bash "$root/scripts/build-libs.sh" "$work/lib" >/dev/null
	(cd "$root" && go test -c -o "$work/attach.test" ./attach)
	pairs="pibgw:$work/attach.test:$work/lib"
fi

# run_one BIN LIBDIR NAME: one round against a fresh daemon.
run_one() {
	local bin=$1 lib=$2 name=$3 sock=$work/attach.sock
	rm -f "$sock" "$work/fifo" "$work/daemon.out"
	mkfifo "$work/fifo"
	PIBGW_ATTACH_HELPER=daemon PIBGW_ATTACH=$sock "$bin" -test.run '^$' <"$work/fifo" >"$work/daemon.out" 2>&1 &
	daemon_pid=$!
	exec 9>"$work/fifo" # the daemon runs until its stdin closes
	for _ in $(seq 100); do
		grep -q ready "$work/daemon.out" 2>/dev/null && break
		sleep 0.1
	done
	local port=$((20000 + RANDOM % 20000)) bw lat
	LD_LIBRARY_PATH=$lib PIBGW_ATTACH=$sock timeout 60 ib_write_bw -d pib_1 -s 65536 --report_gbits -p $port >"$work/s.out" 2>&1 &
	sleep 0.5
	LD_LIBRARY_PATH=$lib PIBGW_ATTACH=$sock timeout 60 ib_write_bw -d pib_0 -s 65536 --report_gbits -p $port 127.0.0.1 >"$work/c.out" 2>&1 || true
	wait $! || true
	bw=$(awk '$1 == 65536 {print $4}' "$work/c.out")
	port=$((port + 1))
	LD_LIBRARY_PATH=$lib PIBGW_ATTACH=$sock timeout 60 ib_send_lat -d pib_1 -s 2 -p $port >"$work/s.out" 2>&1 &
	sleep 0.5
	LD_LIBRARY_PATH=$lib PIBGW_ATTACH=$sock timeout 60 ib_send_lat -d pib_0 -s 2 -p $port 127.0.0.1 >"$work/c.out" 2>&1 || true
	wait $! || true
	lat=$(awk '$1 == 2 {print $3, $5}' "$work/c.out")
	exec 9>&-
	wait "$daemon_pid" || true
	daemon_pid=
	echo "$name load=$(cut -d' ' -f1 /proc/loadavg) write_bw_gbits=${bw:-fail} send_lat_min_typical_us=${lat:-fail}" | tee -a "$work/results"
}

for r in $(seq "$rounds"); do
	for p in $pairs; do
		IFS=: read -r name bin lib <<<"$p"
		run_one "$bin" "$lib" "$name"
	done
done

median() { sort -g | awk '{v[NR]=$1} END {if (NR) print (NR%2 ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2); else print "-"}'; }
for p in $pairs; do
	name=${p%%:*}
	bw=$(awk -v n="$name" '$1 == n {split($3, a, "="); print a[2]}' "$work/results" | grep -v fail | median)
	typ=$(awk -v n="$name" '$1 == n {print $5}' "$work/results" | grep -v fail | median)
	echo "$name medians of $rounds: ib_write_bw ${bw} Gbit/s, ib_send_lat typical ${typ} µs"
done

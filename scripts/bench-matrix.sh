#!/usr/bin/env bash
# Runs issue 42's benchmark matrix through pibgw's libraries between two processes attached
# to one daemon, beside baselines taken in the same run, and prints one markdown table:
#
#   bash scripts/bench-matrix.sh [--write]
#
# Every row runs ROUNDS times (default 3), each round against a fresh daemon, and reports
# the median with the spread (min–max), its baseline's median, their ratio, the issue's
# target and PASS/FAIL against it. The rows: the ibverbs-utils pingpongs, qperf rc_lat
# (event and polling mode), perftest's latency tests, ib_atomic_bw, ib_write_bw, the loss of
# ib_send_bw -c UD, ucx_perftest (UCP and UCT over rc_verbs), Open MPI over UCX (a small
# program compiled here with mpicc) and fi_pingpong -p verbs -e msg. The baselines: the
# same UCX, MPI and libfabric tests over shared memory (UCX's posix transport, with cma
# for MPI's large messages; libfabric's shm provider) for the UCX, MPI and streaming
# rows, ib_send_lat of the same run for the latency rows. When the machine's 1-minute load
# average at the start is above LOAD_MAX it prints it and exits 2 without measuring.
#
# The rows (ids for ROWS=, `--list` prints them): rc_pp rc_pp_e rc_pp_64k qperf_ev
# qperf_poll send_lat write_lat read_lat atomic_lat atomic_bw write_bw ud_loss ucp_tag_lat
# ucp_put_bw uct_am_lat uct_put_bw mpi_lat mpi_bw fi_pp, and the baselines posix_tag_lat
# posix_put_bw posix_am_lat posix_uct_put_bw posix_ucp_add mpi_posix_lat mpi_posix_bw fi_shm.
#
# The daemon is the attach tests' daemon helper (an in-process fabric serving an attach
# socket in a temporary directory, as in scripts/bench-perftest.sh); servers run on pib_1,
# clients on pib_0, meeting over 127.0.0.1 for their TCP exchange. UCX lists an IB device
# only where /dev/infiniband/uverbsN exists: as root the script makes them with
# `pibgw devnodes` and removes them at the end; without them the UCX rc_verbs and MPI rows
# fail with that reason. As root it installs the tools it misses (apt-get, as
# scripts/test.sh does; PIBGW_SKIP_INSTALL=1 does not).
#
# Environment:
#   ROUNDS=N      rounds per row (default 3)
#   QUICK=1       one round and short iteration counts, to try the script on a busy machine
#   LOAD_MAX=L    refuse to report (exit 2) when the 1-minute load average at the start is
#                 above L (default 0.5 per CPU), or still is 3 minutes after the build
#   ROWS="a b"    run only these rows (ids as in `--list`), for trying one out
#   TIMEOUT=S     seconds a tool may run (default 60)
#   BENCH_BUILD=D use D/lib (scripts/build-libs.sh D/lib) and D/attach.test
#                 (go test -c -o D/attach.test ./attach) instead of building them
#
# --write also regenerates docs/performance.md from the table.
set -uo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
write=0
list=0
for arg in "$@"; do
	case $arg in
	--write) write=1 ;;
	--list) list=1 ;;
	-h | --help)
		sed -n '2,/^set -uo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'
		exit 0
		;;
	*)
		echo "bench-matrix.sh: unknown argument $arg (--write, --list, --help)" >&2
		exit 1
		;;
	esac
done

quick=${QUICK:-0}
if [[ $quick == 1 ]]; then
	rounds=${ROUNDS:-1}
else
	rounds=${ROUNDS:-3}
fi
tmo=${TIMEOUT:-60}
ncpu=$(nproc)
load_max=${LOAD_MAX:-$(awk -v n="$ncpu" 'BEGIN {print 0.5 * n}')}

# --- the rows --------------------------------------------------------------------------
# id|label|unit|baseline id (with *factor to convert units)|target conditions|target text
# A condition is "abs OP V" (the figure against V), "ratio OP V" (figure/baseline against
# V) or "rel OP V ROW" (the figure against V times row ROW's median).
ROW_SPECS=(
	"rc_pp|\`ibv_rc_pingpong -s 4096 -n 1000\`|µs/iter|send_lat|abs <= 15|≤ 15 µs/iter"
	"rc_pp_e|\`ibv_rc_pingpong -s 4096 -n 1000 -e\`|µs/iter|send_lat|abs <= 30|≤ 30 µs/iter"
	"rc_pp_64k|\`ibv_rc_pingpong -s 65536 -n 1000\`|Gbit/s|posix_put_bw*8||—"
	"qperf_ev|qperf \`rc_lat\` (event mode, its default)|µs|send_lat|abs <= 30|≤ 30 µs"
	"qperf_poll|qperf \`rc_lat -cp1\` (polling)|µs|send_lat||—"
	"send_lat|\`ib_send_lat -s 2\` (t_typical)|µs|posix_am_lat||—"
	"write_lat|\`ib_write_lat\` (t_typical)|µs|send_lat|ratio <= 2|≤ 2× ib_send_lat"
	"read_lat|\`ib_read_lat\` (t_typical)|µs|send_lat|ratio <= 2|≤ 2× ib_send_lat"
	"atomic_lat|\`ib_atomic_lat\` (t_typical)|µs|send_lat|ratio <= 2|≤ 2× ib_send_lat"
	"atomic_bw|\`ib_atomic_bw\`|M ops/s|posix_ucp_add|abs >= 2|≥ 2 M ops/s"
	"write_bw|\`ib_write_bw -s 65536\`|Gbit/s|posix_put_bw*8|ratio >= 0.5|≥ 0.5× UCX posix ucp_put_bw"
	"ud_loss|\`ib_send_bw -c UD\`: datagrams lost|%||abs <= 1|≤ 1 %"
	"ucp_tag_lat|UCP \`tag_lat\`, rc_verbs|µs|posix_tag_lat|abs <= 5;rel <= 2 uct_am_lat|≤ 5 µs and ≤ 2× UCT am_lat"
	"ucp_put_bw|UCP \`ucp_put_bw\` 64 KiB, rc_verbs|GB/s|posix_put_bw|ratio >= 0.25|≥ 0.25× UCX posix"
	"uct_am_lat|UCT \`am_lat\`, rc_verbs|µs|posix_am_lat||—"
	"uct_put_bw|UCT \`put_bw\` 8 B, rc_verbs|M msg/s|posix_uct_put_bw||—"
	"mpi_lat|Open MPI over UCX (rc_verbs): 8 B round trip|µs|mpi_posix_lat|abs <= 10|≤ 10 µs"
	"mpi_bw|Open MPI over UCX (rc_verbs): 1 MiB bandwidth|GB/s|mpi_posix_bw|abs >= 5|≥ 5 GB/s"
	"fi_pp|\`fi_pingpong -p verbs -e msg\` 1 MiB|GB/s|fi_shm||—"
)
BASE_SPECS=(
	"posix_tag_lat|UCX posix: UCP \`tag_lat\`|µs"
	"posix_put_bw|UCX posix: UCP \`ucp_put_bw\` 64 KiB|GB/s"
	"posix_am_lat|UCX posix: UCT \`am_lat\`|µs"
	"posix_uct_put_bw|UCX posix: UCT \`put_bw\` 8 B|M msg/s"
	"posix_ucp_add|UCX posix: UCP \`ucp_add\` (atomic add rate)|M ops/s"
	"mpi_posix_lat|Open MPI over UCX posix+cma: 8 B round trip|µs"
	"mpi_posix_bw|Open MPI over UCX posix+cma: 1 MiB bandwidth|GB/s"
	"fi_shm|\`fi_pingpong -p shm -e rdm\` 1 MiB|GB/s"
)
all_ids=()
for s in "${ROW_SPECS[@]}" "${BASE_SPECS[@]}"; do
	all_ids+=("${s%%|*}")
done
if [[ $list == 1 ]]; then
	printf '%s\n' "${all_ids[@]}"
	exit 0
fi
run_ids=(${ROWS:-${all_ids[*]}})

# --- the load ----------------------------------------------------------------------------
load=$(cut -d' ' -f1 /proc/loadavg)
echo "bench-matrix.sh: load average $load at the start, LOAD_MAX $load_max ($ncpu CPUs; 0.5 per CPU unless LOAD_MAX says)" >&2
if awk -v l="$load" -v m="$load_max" 'BEGIN {exit !(l > m)}'; then
	echo "bench-matrix.sh: the 1-minute load average is $load, above $load_max: not reporting (wait for a quiet machine, or set LOAD_MAX)" >&2
	exit 2
fi

# --- tools -------------------------------------------------------------------------------
TOOLS=(
	"ibv_rc_pingpong ibverbs-utils" "qperf qperf" "ib_send_lat perftest" "ucx_perftest ucx-utils"
	"mpirun openmpi-bin" "mpicc libopenmpi-dev" "fi_pingpong libfabric-bin" "gcc gcc" "ss iproute2" "pgrep procps"
	"/usr/include/infiniband/verbs.h libibverbs-dev" "/usr/include/rdma/rdma_cma.h librdmacm-dev"
)
missing=()
for row in "${TOOLS[@]}"; do
	read -r tool pkg <<<"$row"
	if [[ $tool == /* ]]; then
		[[ -e $tool ]] || missing+=("$pkg")
	elif ! command -v "$tool" >/dev/null 2>&1; then
		missing+=("$pkg")
	fi
done
if ((${#missing[@]})); then
	if [[ $(id -u) -ne 0 || ${PIBGW_SKIP_INSTALL:-0} == 1 ]]; then
		echo "bench-matrix.sh: missing ${missing[*]}; not installing (as root: apt-get install ${missing[*]}): their rows fail" >&2
	else
		echo "bench-matrix.sh: installing ${missing[*]}" >&2
		if ! { apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}"; } >/dev/null 2>&1; then
			echo "bench-matrix.sh: apt-get install ${missing[*]} failed; their rows fail" >&2
		fi
	fi
fi

# --- build -------------------------------------------------------------------------------
work=$(mktemp -d)
daemon_pid=
holder_pid=
made_nodes=0
cleanup() {
	if declare -F stop_daemon >/dev/null; then
		stop_daemon
	fi
	if [[ $made_nodes == 1 ]]; then
		"$work/pibgw" devnodes --remove >/dev/null 2>&1 || true
	fi
	rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

if [[ -n ${BENCH_BUILD:-} ]]; then
	echo "bench-matrix.sh: using the build in $BENCH_BUILD" >&2
	ln -s "$BENCH_BUILD/lib" "$work/lib"
	ln -s "$BENCH_BUILD/attach.test" "$work/attach.test"
else
	echo "bench-matrix.sh: building pibgw's libraries and the attach test daemon in $work" >&2
fi
if [[ -n ${BENCH_BUILD:-} ]]; then
	:
elif ! bash "$root/scripts/build-libs.sh" "$work/lib" >"$work/build.log" 2>&1 ||
	! (cd "$root" && go test -c -o "$work/attach.test" ./attach) >>"$work/build.log" 2>&1; then
	cat "$work/build.log" >&2
	echo "bench-matrix.sh: the build failed" >&2
	exit 1
fi
lib=$work/lib
sock=$work/attach.sock

# The build's own load: wait (up to 3 minutes) for the 1-minute average to fall below
# LOAD_MAX again before measuring.
for ((waited = 0; ; waited += 10)); do
	load_now=$(cut -d' ' -f1 /proc/loadavg)
	awk -v l="$load_now" -v m="$load_max" 'BEGIN {exit !(l > m)}' || break
	if ((waited >= 180)); then
		echo "bench-matrix.sh: the load average is $load_now after the build, above $load_max: not reporting" >&2
		exit 2
	fi
	((waited == 0)) && echo "bench-matrix.sh: load average $load_now after the build; waiting for it to fall below $load_max" >&2
	sleep 10
done

# UCX lists an IB device only where /dev/infiniband/uverbsN exists.
nodes_reason=
if [[ ! -e /dev/infiniband/uverbs1 ]]; then
	if [[ $(id -u) -ne 0 ]]; then
		nodes_reason="no /dev/infiniband/uverbs0 and 1, which UCX needs (as root the script makes them: pibgw devnodes)"
	elif (cd "$root" && CGO_ENABLED=0 go build -o "$work/pibgw" ./cmd/pibgw) >"$work/devnodes.out" 2>&1 &&
		"$work/pibgw" devnodes --count 2 >>"$work/devnodes.out" 2>&1; then
		made_nodes=1
	else
		nodes_reason="pibgw devnodes: $(tail -n1 "$work/devnodes.out")"
	fi
fi

# The MPI program: an 8-byte ping-pong (round trip) and a window of 1 MiB sends (bandwidth,
# as OSU's osu_bw measures it: 16 sends in flight, then a short acknowledgement).
cat >"$work/mpi_bench.c" <<'EOF'
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
int main(int argc, char **argv)
{
	int lat_iters = atoi(argv[1]), bw_iters = atoi(argv[2]), rank, win = 16, n = 1 << 20;
	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	char small[8] = {0}, *buf = malloc((size_t)n * win), ack = 0;
	MPI_Request req[16];
	double t0 = 0;
	for (int i = -lat_iters / 10; i < lat_iters; i++) { /* a tenth as warm-up */
		if (i == 0)
			t0 = MPI_Wtime();
		if (rank == 0) {
			MPI_Send(small, 8, MPI_BYTE, 1, 0, MPI_COMM_WORLD);
			MPI_Recv(small, 8, MPI_BYTE, 1, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
		} else {
			MPI_Recv(small, 8, MPI_BYTE, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
			MPI_Send(small, 8, MPI_BYTE, 0, 0, MPI_COMM_WORLD);
		}
	}
	if (rank == 0)
		printf("lat_us %.3f\n", (MPI_Wtime() - t0) / lat_iters * 1e6);
	for (int i = -2; i < bw_iters; i++) {
		if (i == 0)
			t0 = MPI_Wtime();
		for (int w = 0; w < win; w++) {
			if (rank == 0)
				MPI_Isend(buf + (size_t)w * n, n, MPI_BYTE, 1, 1, MPI_COMM_WORLD, &req[w]);
			else
				MPI_Irecv(buf + (size_t)w * n, n, MPI_BYTE, 0, 1, MPI_COMM_WORLD, &req[w]);
		}
		MPI_Waitall(win, req, MPI_STATUSES_IGNORE);
		if (rank == 0)
			MPI_Recv(&ack, 1, MPI_BYTE, 1, 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
		else
			MPI_Send(&ack, 1, MPI_BYTE, 0, 2, MPI_COMM_WORLD);
	}
	if (rank == 0)
		printf("bw_GBps %.3f\n", (double)n * win * bw_iters / (MPI_Wtime() - t0) / 1e9);
	MPI_Finalize();
	return 0;
}
EOF
mpi_reason=
if ! command -v mpicc >/dev/null || ! mpicc -O2 -o "$work/mpi_bench" "$work/mpi_bench.c" >"$work/mpicc.out" 2>&1; then
	mpi_reason="mpicc failed: $(tail -n1 "$work/mpicc.out" 2>/dev/null)"
fi

# --- running one measurement -----------------------------------------------------------
start_daemon() {
	rm -f "$sock" "$work/fifo" "$work/daemon.out"
	mkfifo "$work/fifo"
	PIBGW_ATTACH_HELPER=daemon PIBGW_ATTACH=$sock "$work/attach.test" -test.run '^$' <"$work/fifo" >"$work/daemon.out" 2>&1 &
	daemon_pid=$!
	sleep 1000000 >"$work/fifo" & # the daemon runs until its stdin closes
	holder_pid=$!
	for _ in $(seq 300); do
		grep -q ready "$work/daemon.out" 2>/dev/null && return 0
		kill -0 "$daemon_pid" 2>/dev/null || break
		sleep 0.1
	done
	reason="the daemon did not start: $(tail -n1 "$work/daemon.out")"
	return 1
}
stop_daemon() {
	if [[ -n $holder_pid ]]; then
		kill "$holder_pid" 2>/dev/null
		wait "$holder_pid" 2>/dev/null
		holder_pid=
	fi
	if [[ -n $daemon_pid ]]; then
		for _ in $(seq 50); do
			kill -0 "$daemon_pid" 2>/dev/null || break
			sleep 0.1
		done
		kill "$daemon_pid" 2>/dev/null
		wait "$daemon_pid" 2>/dev/null
		daemon_pid=
	fi
}

# lastline FILE: its last non-empty line, for a failed row's reason.
lastline() { grep -v '^[[:space:]]*$' "$1" 2>/dev/null | tail -n1 | tr -s ' \t|' ' ' | cut -c1-120; }

# wait_gone PID SECONDS: until the process has ended (0) or the time ran out (1).
wait_gone() {
	local i
	for ((i = 0; i < $2 * 10; i++)); do
		kill -0 "$1" 2>/dev/null || return 0
		sleep 0.1
	done
	return 1
}

port=$((20000 + RANDOM % 20000))
# pair: runs server S (environment SE) and, once it listens on $port, client C
# (environment CE), each under a timeout; the outputs in $work/s.out and $work/c.out.
# SERVER_STAYS=1: the server runs until killed (qperf). ON_LINGER: a function run on the
# server 5 s after the client's output has a line matching LINGER_AFTER while the client
# still runs (ib_send_bw -c UD's server waiting for lost datagrams).
pair() {
	rm -f "$work/s.out" "$work/c.out"
	env "${SE[@]}" timeout -k 5 $((tmo + 30)) "${S[@]}" >"$work/s.out" 2>&1 &
	local spid=$! i crc
	for ((i = 0; i < 300; i++)); do
		ss -Hltn "sport = :$port" 2>/dev/null | grep -q . && break
		if ! kill -0 $spid 2>/dev/null; then
			reason="server ended: $(lastline "$work/s.out")"
			return 1
		fi
		sleep 0.1
	done
	if ((i == 300)); then
		kill $spid 2>/dev/null
		wait $spid 2>/dev/null
		reason="the server did not listen on port $port in 30 s"
		return 1
	fi
	env "${CE[@]}" timeout -k 5 "$tmo" "${C[@]}" >"$work/c.out" 2>&1 &
	local cpid=$! waited=0
	if [[ -n ${ON_LINGER:-} ]]; then
		# Once the client has printed its result it has sent everything; a server still
		# waiting 5 s later (and the client with it, for its closing exchange) lost some.
		while kill -0 $cpid 2>/dev/null; do
			if grep -q "${LINGER_AFTER:-.}" "$work/c.out" 2>/dev/null && ((waited++ == 50)); then
				$ON_LINGER $spid
			fi
			sleep 0.1
		done
	fi
	wait $cpid
	crc=$?
	if [[ ${SERVER_STAYS:-0} == 1 ]]; then
		kill $spid 2>/dev/null
	elif ! wait_gone $spid 5; then
		kill $spid 2>/dev/null
	fi
	wait $spid 2>/dev/null
	if ((crc == 124 || crc == 137)); then
		reason="timed out after $tmo s: $(lastline "$work/c.out")"
		return 1
	elif ((crc != 0)); then
		reason="client exit $crc: $(lastline "$work/c.out")"
		return 1
	fi
	return 0
}

pib_env() { SE=(LD_LIBRARY_PATH=$lib PIBGW_ATTACH=$sock "$@") CE=(LD_LIBRARY_PATH=$lib PIBGW_ATTACH=$sock "$@"); }

# value V: the row's figure; anything not a number is a failure.
value=
got() {
	if [[ $1 =~ ^[0-9.e+-]+$ ]]; then
		value=$1
		return 0
	fi
	reason="no figure in the output: $(lastline "$work/c.out")"
	return 1
}

# after_bytes_header FIELD FILE: perftest's result line (after "#bytes …"), field FIELD.
after_bytes_header() { awk -v f="$1" '/#bytes/ {getline; print $f; exit}' "$2"; }

n_lat=$([[ $quick == 1 ]] && echo 2000 || echo 20000)
n_bw64k=$([[ $quick == 1 ]] && echo 500 || echo 5000)
n_rate=$([[ $quick == 1 ]] && echo 20000 || echo 200000)
qperf_t=$([[ $quick == 1 ]] && echo 1 || echo 3)
mpi_args=$([[ $quick == 1 ]] && echo "1000 10" || echo "20000 100")
fi_iters=$([[ $quick == 1 ]] && echo 20 || echo 200)

rc_pingpong() { # extra args; prints the client's µs/iter or Mbit/sec
	pib_env
	S=(ibv_rc_pingpong -d pib_1 -p $port "$@") C=(ibv_rc_pingpong -d pib_0 -p $port "$@" 127.0.0.1)
	pair || return 1
}
perftest() { # tool args…
	local tool=$1
	shift
	pib_env
	S=("$tool" -d pib_1 -p $port "$@") C=("$tool" -d pib_0 -p $port "$@" 127.0.0.1)
	pair
}
qperf_lat() {
	pib_env
	S=(qperf -lp $port) C=(qperf 127.0.0.1 -lp $port -li pib_0:1 -ri pib_1:1 -t $qperf_t "$@" rc_lat)
	SERVER_STAYS=1 pair || return 1
	# "latency  =  12.8 us": in µs
	got "$(awk '$1 == "latency" {v = $3; u = $4; print (u == "ns" ? v / 1000 : u == "ms" ? v * 1000 : u == "sec" ? v * 1e6 : v)}' "$work/c.out")"
}
# ucx TLS DEVICES FIELD SCALE args…: ucx_perftest's "Final:" line, field FIELD times SCALE.
# TLS "posix" runs over UCX's shared memory without pibgw's libraries.
ucx() {
	local tls=$1 field=$2 scale=$3
	shift 3
	if [[ $tls == posix ]]; then
		SE=(UCX_TLS=posix,self) CE=(UCX_TLS=posix,self)
	else
		if [[ -n $nodes_reason ]]; then
			reason=$nodes_reason
			return 1
		fi
		pib_env UCX_TLS=rc_verbs,ud_verbs,self
		SE+=(UCX_NET_DEVICES=pib_1:1) CE+=(UCX_NET_DEVICES=pib_0:1)
	fi
	S=(ucx_perftest -p $port) C=(ucx_perftest 127.0.0.1 -p $port "$@")
	pair || return 1
	got "$(awk -v f="$field" -v s="$scale" '$1 == "Final:" {print $f * s}' "$work/c.out")"
}
# mpi TLS FIELD: the MPI program's figure over UCX's TLS (rc_verbs or posix).
mpi() {
	if [[ -n $mpi_reason ]]; then
		reason=$mpi_reason
		return 1
	fi
	local envs=(-x UCX_TLS=posix,cma,self) # cma: UCX's rendezvous for large messages
	if [[ $1 == rc_verbs ]]; then
		if [[ -n $nodes_reason ]]; then
			reason=$nodes_reason
			return 1
		fi
		envs=(-x UCX_TLS=rc_verbs,ud_verbs,self -x LD_LIBRARY_PATH=$lib -x PIBGW_ATTACH=$sock)
	fi
	# rank 0 on pib_0, rank 1 on pib_1
	# pml_ucx_tls/devices any: Open MPI's UCX layer otherwise declines shared memory alone
	timeout -k 5 "$tmo" mpirun --allow-run-as-root --oversubscribe -np 2 --mca pml ucx --mca pml_ucx_tls any \
		--mca pml_ucx_devices any --mca btl '^openib' "${envs[@]}" \
		sh -c 'UCX_NET_DEVICES=pib_${OMPI_COMM_WORLD_RANK}:1 exec "$@"' sh "$work/mpi_bench" $mpi_args >"$work/c.out" 2>&1
	local rc=$?
	if ((rc != 0)); then
		reason="mpirun exit $rc: $(lastline "$work/c.out")"
		return 1
	fi
	got "$(awk -v k="$2" '$1 == k {print $2}' "$work/c.out")"
}
fi_pingpong_1m() { # provider endpoint
	if [[ $1 == verbs ]]; then
		pib_env
		S=(fi_pingpong -p verbs -e msg -d pib_1 -B $port -S 1048576 -I $fi_iters) C=(fi_pingpong -p verbs -e msg -d pib_0 -P $port -S 1048576 -I $fi_iters 127.0.0.1)
	else
		SE=() CE=()
		S=(fi_pingpong -p "$1" -e "$2" -B $port -S 1048576 -I $fi_iters) C=(fi_pingpong -p "$1" -e "$2" -P $port -S 1048576 -I $fi_iters 127.0.0.1)
	fi
	pair || return 1
	# "bytes #sent #ack total time MB/sec …" (the columns vary): MB/sec in GB/s
	got "$(awk '$1 == "bytes" {for (i = 1; i <= NF; i++) if ($i == "MB/sec") c = i} $1 == "1m" && c {print $c / 1000}' "$work/c.out")"
}
# ud_linger PID: ib_send_bw's server waits for every datagram; two SIGALRMs make it print
# "Total Received=N" and end, as its own 60 s watchdog (check_alive) would after 120 s.
# PID is timeout(1)'s, which takes SIGALRM as its own: signal its child.
ud_linger() {
	local child
	child=$(pgrep -P "$1" | head -n1)
	[[ -n $child ]] || return 0
	kill -ALRM "$child" 2>/dev/null
	sleep 0.5
	kill -ALRM "$child" 2>/dev/null
}

# measure ID: one measurement of row ID into $value, or $reason.
measure() {
	value= reason=
	case $1 in
	rc_pp | rc_pp_e)
		local e=()
		[[ $1 == rc_pp_e ]] && e=(-e)
		rc_pingpong -s 4096 -n 1000 "${e[@]}" || return 1
		got "$(awk '/usec\/iter/ {print $(NF-1)}' "$work/c.out")"
		;;
	rc_pp_64k)
		rc_pingpong -s 65536 -n 1000 || return 1
		got "$(awk '/Mbit\/sec/ {print $(NF-1) / 1000}' "$work/c.out")"
		;;
	qperf_ev) qperf_lat ;;
	qperf_poll) qperf_lat -cp1 ;;
	send_lat) perftest ib_send_lat -s 2 && got "$(after_bytes_header 5 "$work/c.out")" ;;
	write_lat) perftest ib_write_lat && got "$(after_bytes_header 5 "$work/c.out")" ;;
	read_lat) perftest ib_read_lat && got "$(after_bytes_header 5 "$work/c.out")" ;;
	atomic_lat) perftest ib_atomic_lat && got "$(after_bytes_header 5 "$work/c.out")" ;;
	atomic_bw) perftest ib_atomic_bw && got "$(after_bytes_header 5 "$work/c.out")" ;;
	write_bw) perftest ib_write_bw -s 65536 --report_gbits && got "$(after_bytes_header 4 "$work/c.out")" ;;
	ud_loss)
		# stdbuf: the client's result line reaches c.out when printed (see pair)
		pib_env
		S=(ib_send_bw -d pib_1 -p $port -c UD) C=(stdbuf -oL ib_send_bw -d pib_0 -p $port -c UD 127.0.0.1)
		ON_LINGER=ud_linger LINGER_AFTER='^ *4096 ' pair || return 1
		local sent recvd
		sent=$(after_bytes_header 2 "$work/c.out")
		recvd=$(sed -n 's/.*Total Received=\([0-9]*\).*/\1/p' "$work/s.out")
		[[ -z $recvd ]] && recvd=$(after_bytes_header 2 "$work/s.out")
		if [[ -z $sent || -z $recvd ]]; then
			reason="no counts: client: $(lastline "$work/c.out"); server: $(lastline "$work/s.out")"
			return 1
		fi
		got "$(awk -v s="$sent" -v r="$recvd" 'BEGIN {print (s > 0 ? 100 * (s - r) / s : 0)}')"
		;;
	ucp_tag_lat) ucx rc_verbs 3 1 -t tag_lat -n $n_lat ;;
	posix_tag_lat) ucx posix 3 1 -t tag_lat -n $n_lat ;;
	# ucx_perftest's MB/s are MiB/s: in GB/s
	ucp_put_bw) ucx rc_verbs 7 0.001048576 -t ucp_put_bw -s 65536 -n $n_bw64k ;;
	posix_put_bw) ucx posix 7 0.001048576 -t ucp_put_bw -s 65536 -n $n_bw64k ;;
	uct_am_lat) ucx rc_verbs 3 1 -t am_lat -x rc_verbs -d pib_0:1 -n $n_lat ;;
	posix_am_lat) ucx posix 3 1 -t am_lat -x posix -d memory -n $n_lat ;;
	uct_put_bw) ucx rc_verbs 9 0.000001 -t put_bw -x rc_verbs -d pib_0:1 -s 8 -n $n_rate ;;
	posix_uct_put_bw) ucx posix 9 0.000001 -t put_bw -x posix -d memory -s 8 -n $n_rate ;;
	posix_ucp_add) ucx posix 9 0.000001 -t ucp_add -n $n_rate ;;
	mpi_lat) mpi rc_verbs lat_us ;;
	mpi_bw) mpi rc_verbs bw_GBps ;;
	mpi_posix_lat) mpi posix lat_us ;;
	mpi_posix_bw) mpi posix bw_GBps ;;
	fi_pp) fi_pingpong_1m verbs msg ;;
	fi_shm) fi_pingpong_1m shm rdm ;;
	*)
		reason="unknown row $1"
		return 1
		;;
	esac
}

# --- the rounds --------------------------------------------------------------------------
results=$work/results
: >"$results"
for ((r = 1; r <= rounds; r++)); do
	for id in "${run_ids[@]}"; do
		port=$((port + 1))
		daemon_ok=1
		case $id in posix_* | mpi_posix_* | fi_shm) ;; *) start_daemon || daemon_ok=0 ;; esac
		if ((daemon_ok)) && measure "$id"; then
			echo "$id ok $value" >>"$results"
			echo "round $r/$rounds $id: $value (load $(cut -d' ' -f1 /proc/loadavg))" >&2
		else
			echo "$id failed $reason" >>"$results"
			echo "round $r/$rounds $id: failed: $reason" >&2
		fi
		stop_daemon
	done
done

# --- the table ---------------------------------------------------------------------------
# stats ID: "median min max n" of the row's figures, or "failed REASON".
stats() {
	local vals
	vals=$(awk -v id="$1" '$1 == id && $2 == "ok" {print $3}' "$results" | sort -g)
	if [[ -z $vals ]]; then
		local why
		why=$(awk -v id="$1" '$1 == id && $2 == "failed" {$1 = $2 = ""; print substr($0, 3)}' "$results" | tail -n1)
		echo "failed ${why:-not run}"
		return
	fi
	awk '{v[NR] = $1} END {printf "%s %s %s %d\n", (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2), v[1], v[NR], NR}' <<<"$vals"
}
fmt() { awk -v v="$1" 'BEGIN {a = v < 0 ? -v : v; if (a >= 100) printf "%.0f", v; else if (a >= 10) printf "%.1f", v; else if (a >= 0.1) printf "%.2f", v; else printf "%.3g", v}'; }
median_of() {
	local s
	s=$(stats "$1")
	[[ $s == failed* ]] && return 1
	echo "${s%% *}"
}
# cmp A OP B: 0 if A OP B holds.
cmp() { awk -v a="$1" -v b="$3" -v op="$2" 'BEGIN {exit !(op == "<=" ? a <= b : a >= b)}'; }

table=$work/table.md
{
	echo "| program | figure: median (min–max, rounds) | unit | baseline (same run) | ratio | target | result |"
	echo "|---|---|---|---|---|---|---|"
	for spec in "${ROW_SPECS[@]}"; do
		IFS='|' read -r id label unit base conds ttext <<<"$spec"
		[[ " ${run_ids[*]} " == *" $id "* ]] || continue
		s=$(stats "$id")
		if [[ $s == failed* ]]; then
			echo "| $label | failed: ${s#failed } | $unit | | | $ttext | $([[ -n $conds ]] && echo FAIL || echo —) |"
			continue
		fi
		read -r med lo hi n <<<"$s"
		fig="$(fmt "$med") ($(fmt "$lo")–$(fmt "$hi"), $n)"
		bval= bcell="—" ratio="—"
		if [[ -n $base ]]; then
			bid=${base%%\**} factor=1
			[[ $base == *\** ]] && factor=${base#*\*}
			bname=$bid
			for b in "${ROW_SPECS[@]}" "${BASE_SPECS[@]}"; do
				[[ ${b%%|*} == "$bid" ]] && bname=$(cut -d'|' -f2 <<<"$b" | sed 's/ (t_typical)$//')
			done
			if bm=$(median_of "$bid"); then
				bval=$(awk -v m="$bm" -v f="$factor" 'BEGIN {print m * f}')
				bcell="$(fmt "$bval"): $bname"
				ratio=$(awk -v a="$med" -v b="$bval" 'BEGIN {if (b > 0) print a / b; else print "-"}')
				[[ $ratio == - ]] && ratio="—" || ratio="$(fmt "$ratio")×"
			elif [[ " ${run_ids[*]} " == *" $bid "* ]]; then
				bcell="failed: $bname"
			else
				bcell="not run: $bname"
			fi
		fi
		result="—"
		if [[ -n $conds ]]; then
			result=PASS
			IFS=';' read -ra cs <<<"$conds"
			for c in "${cs[@]}"; do
				read -r kind op v other <<<"$c"
				case $kind in
				abs) cmp "$med" "$op" "$v" || result=FAIL ;;
				ratio)
					if [[ -z $bval ]]; then
						result="FAIL (no baseline)"
					else
						cmp "$med" "$op" "$(awk -v b="$bval" -v v="$v" 'BEGIN {print b * v}')" || result=FAIL
					fi
					;;
				rel)
					if om=$(median_of "$other"); then
						cmp "$med" "$op" "$(awk -v b="$om" -v v="$v" 'BEGIN {print b * v}')" || result=FAIL
					else
						result="FAIL (no $other)"
					fi
					;;
				esac
			done
		fi
		echo "| $label | $fig | $unit | $bcell | $ratio | $ttext | $result |"
	done
	for spec in "${BASE_SPECS[@]}"; do
		IFS='|' read -r id label unit <<<"$spec"
		[[ " ${run_ids[*]} " == *" $id "* ]] || continue
		s=$(stats "$id")
		if [[ $s == failed* ]]; then
			echo "| $label | failed: ${s#failed } | $unit | (baseline) | | | |"
			continue
		fi
		read -r med lo hi n <<<"$s"
		echo "| $label | $(fmt "$med") ($(fmt "$lo")–$(fmt "$hi"), $n) | $unit | (baseline) | | | |"
	done
} >"$table"

load_end=$(cut -d' ' -f1 /proc/loadavg)
cat "$table"
echo
echo "load average $load at the start (LOAD_MAX $load_max), $load_end at the end; $rounds round(s)$([[ $quick == 1 ]] && echo ', QUICK=1')"

if [[ $write == 1 ]]; then
	cpu=$(awk -F': ' '/^model name/ {print $2; exit}' /proc/cpuinfo)
	commit=$(cd "$root" && git rev-parse --short HEAD 2>/dev/null)
	dirty=$(cd "$root" && git status --porcelain --untracked-files=no 2>/dev/null | grep -q . && echo " with uncommitted changes")
	{
		echo "# Performance"
		echo
		echo "<!-- Generated by scripts/bench-matrix.sh --write; do not edit by hand: run it again. -->"
		echo
		if [[ $quick == 1 ]]; then
			echo "**Quick run, not for comparison** (QUICK=1: one round, short iteration counts, whatever"
			echo "the load). Regenerate it on a quiet machine with \`bash scripts/bench-matrix.sh --write\`."
			echo
		fi
		echo "Issue 42's matrix: each program between two processes attached to one pibgw daemon"
		echo "(server on \`pib_1\`, client on \`pib_0\`, pibgw's \`libibverbs.so.1\` from"
		echo "\`scripts/build-libs.sh\`), beside baselines taken in the same run: UCX's posix shared-memory"
		echo "transport (Open MPI: over it with UCX's cma for large messages) and libfabric's shm provider"
		echo "for the UCX, MPI and streaming rows, \`ib_send_lat\` for the latency rows. Each figure is the"
		echo "median of $rounds round(s), each against a fresh daemon, with the spread (min–max, rounds);"
		echo "the target is issue 42's."
		echo
		echo "Machine: $ncpu CPUs ($cpu), $(uname -sr); pibgw $commit$dirty${BENCH_BUILD:+ (libraries built beforehand: BENCH_BUILD)};"
		echo "1-minute load average $load at the start (the script refuses above $load_max)."
		echo
		cat "$table"
		echo
		echo "## Commands"
		echo
		echo "Servers run with \`-d pib_1\` (UCX: \`UCX_NET_DEVICES=pib_1:1\`), clients with \`-d pib_0\` and"
		echo "\`127.0.0.1\`, all with \`LD_LIBRARY_PATH\` on pibgw's libraries and \`PIBGW_ATTACH\` on the"
		echo "daemon's socket; the baselines without them."
		echo
		echo "| program | command (client side) | figure read |"
		echo "|---|---|---|"
		echo "| \`ibv_rc_pingpong\` | \`ibv_rc_pingpong -d pib_0 -s 4096 -n 1000 [-e] 127.0.0.1\`; \`-s 65536\` | µs/iter; Mbit/sec |"
		echo "| qperf | server \`qperf\`, client \`qperf 127.0.0.1 -li pib_0:1 -ri pib_1:1 -t $qperf_t [-cp1] rc_lat\` | latency |"
		echo "| perftest | \`ib_send_lat -s 2\`, \`ib_write_lat\`, \`ib_read_lat\`, \`ib_atomic_lat\`, \`ib_atomic_bw\`, \`ib_write_bw -s 65536 --report_gbits\` | t_typical; MsgRate; BW average |"
		echo "| \`ib_send_bw -c UD\` | defaults (1000 datagrams of 4 KiB, TX depth 128) | the client's sent count against the server's received count (its \`Total Received\`, printed on SIGALRM) |"
		echo "| ucx_perftest | \`UCX_TLS=rc_verbs,ud_verbs,self ucx_perftest 127.0.0.1 -t tag_lat -n $n_lat\`; \`-t ucp_put_bw -s 65536 -n $n_bw64k\`; UCT \`-t am_lat -x rc_verbs -d pib_0:1 -n $n_lat\`, \`-t put_bw -x rc_verbs -d pib_0:1 -s 8 -n $n_rate\`; baselines \`UCX_TLS=posix,self\`, UCT \`-x posix -d memory\`, \`-t ucp_add -n $n_rate\` | Final: 50th percentile latency; overall bandwidth (MiB/s, shown in GB/s); overall message rate |"
		echo "| Open MPI | \`mpirun -np 2 --mca pml ucx -x UCX_TLS=rc_verbs,ud_verbs,self\` (baseline: \`UCX_TLS=posix,cma,self\`), rank N on \`pib_N\`, a program compiled by the script: $(cut -d' ' -f1 <<<"$mpi_args") 8-byte round trips; $(cut -d' ' -f2 <<<"$mpi_args") windows of 16 × 1 MiB sends, each acknowledged | round trip; bytes per second |"
		echo "| fi_pingpong | \`fi_pingpong -p verbs -e msg -d pib_0 -S 1048576 -I $fi_iters 127.0.0.1\`; baseline \`-p shm -e rdm\` | MB/sec |"
	} >"$root/docs/performance.md"
	echo "wrote $root/docs/performance.md" >&2
fi

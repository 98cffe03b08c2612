#!/usr/bin/env bash
# bench-ipoib.sh — IPoIB datagram mode against its ceilings, in one run, on this machine.
#
# Ten setups, each two network namespaces (MTU 2044 unless said), all set up before measuring:
#   veth    a veth pair (the kernel's own ceiling, no TUN at all);
#   relay   two TUN devices joined by cmd/tunrelay, a plain relay with no IB processing —
#           the ceiling for any TUN design;
#   pibgw   `pibgw up` in datagram mode: TUN → IPoIB → UD → switch → UD → IPoIB → TUN.
#   relay64k  the relay at MTU 65520, the ceiling for connected mode;
#   gso64k  the relay at MTU 65520 with -gso: each kernel segment read and written in one
#           buffer, no copy and no work in user space — the cheapest a TUN pair can move;
#   connected `pibgw up` with both interfaces in connected mode (RFC 4755, MTU 65520):
#           TUN → IPoIB → RC connection → switch → RC → IPoIB → TUN.
#   udp     two hosts of a multi-host fabric: `pibgw switch` and two `pibgw up` (each its own
#           process, fabric.switch on loopback), datagram mode: TUN → IPoIB → UD → UDP link →
#           switch process → UDP link → UD → IPoIB → TUN;
#   udpcm   the same in connected mode.
#   udpchain  the ceiling of udpcm: cmd/tunrelay as a UDP chain at MTU 65520 — two sides
#           (TUN ↔ UDP) and a forwarder between them, three processes on loopback as
#           udpcm's; each segment crosses in datagrams of a UDP link's sizes (4,096 bytes
#           behind 42 of header, UDP_SEGMENT and UDP_GRO), with no IB processing, checksum,
#           acknowledgement or copy in user space.
#   udpcrc  udpchain with -crc: also the per-byte work a UDP link's data path must do —
#           the sender completes the TCP checksum and makes each datagram's CRC-32 and
#           CRC-16 (ICRC, VCRC), the forwarder checks the CRC-16, the receiver both.
# For each: ping RTT (median of 200 pings) and iperf3 TCP throughput (10 s), and pibgw's
# ratios to the relay; for the relays and pibgw, the CPU their processes used during the
# iperf3 run, per Gbit/s moved (% of one CPU per Gbit/s, from /proc/PID/stat; for the
# multi-host setups also each process's: switch, host A, host B), the share of it spent
# in the kernel (kernel%), and what iperf3's client and server used per Gbit/s (as iperf3
# reports it: user and system time of the two processes). The measurements are
# interleaved — pings in bursts of 50 taken in turn, iperf3 runs in turn (order reversed
# every round) — so that the load of a shared machine, which drifts over seconds, weighs
# on all setups alike. ROUNDS=N repeats the iperf3 runs and reports each setup's median. pibgw runs with its default scheduler
# setting (daemon.max_procs: half the CPUs), the relay with Go's (all CPUs);
# RELAY_MAXPROCS=N runs the relay with GOMAXPROCS=N instead, and PIBGW_MAXPROCS=N pibgw
# with daemon.max_procs = N, to compare at equal settings. SETUPS="pibgw udp" measures only
# the setups named (default: all ten); TCP_CC=cubic has iperf3 use that congestion
# control (default: the system's, printed in the header — the figures depend on it: BBR
# paces at its estimate, CUBIC fills the queues); a ratio whose baseline was not measured
# prints "-". Needs root, ip, ping, iperf3 (scripts/test.sh installs it) and Go.
#
#   sudo bash scripts/bench-ipoib.sh            # PINGS=200 DURATION=10 MTU=2044 ROUNDS=3
#
# Traffic stays inside the namespaces this script creates (names bench-*-<pid>), which it
# removes on exit, as it does every process it started.
set -euo pipefail
cd "$(dirname "$0")/.."

PINGS=${PINGS:-200}
DURATION=${DURATION:-10}
MTU=${MTU:-2044}
ROUNDS=${ROUNDS:-3}
RELAY_MAXPROCS=${RELAY_MAXPROCS:-}
SETUPS=${SETUPS:-veth relay pibgw relay64k gso64k connected udp udpcm udpchain udpcrc}
PIBGW_MAXPROCS=${PIBGW_MAXPROCS:-0}
TCP_CC=${TCP_CC:-}
tag=$$
work=$(mktemp -d "${TMPDIR:-/tmp}/pibgw-bench.XXXXXX")
pids=()
netns=()

cleanup() {
	for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
	for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
	for n in "${netns[@]}"; do ip netns del "$n" 2>/dev/null || true; done
	rm -rf "$work"
}
trap cleanup EXIT INT TERM

need() { command -v "$1" >/dev/null || { echo "bench-ipoib: $1 is not installed" >&2; exit 1; }; }
[ "$(id -u)" = 0 ] || { echo "bench-ipoib: needs root (network namespaces, TUN devices)" >&2; exit 1; }
need ip; need ping; need iperf3; need go

go build -o "$work/pibgw" ./cmd/pibgw
go build -o "$work/tunrelay" ./cmd/tunrelay

# rtts NS ADDR COUNT: COUNT round trips in ms, one per line (after a warm-up).
rtts() {
	ip netns exec "$1" ping -n -c "$3" -i 0.005 "$2" | sed -n 's/.*time=\([0-9.]*\) ms.*/\1/p'
}

# median: the median of the numbers on stdin.
median() {
	sort -n | awk '{v[NR]=$1} END {if (NR==0) {print "nan"; exit} m=(NR%2)?v[(NR+1)/2]:(v[NR/2]+v[NR/2+1])/2; printf "%.3f", m}'
}

# tcp_gbps CLIENT_NS SERVER_NS SERVER_ADDR: iperf3 TCP throughput in Gbit/s.
tcp_gbps() {
	ip netns exec "$2" iperf3 -s -1 -p 5201 >/dev/null 2>&1 &
	local srv=$!
	sleep 0.5
	ip netns exec "$1" iperf3 -c "$3" -p 5201 -t "$DURATION" ${TCP_CC:+-C "$TCP_CC"} -J >"$work/iperf.json"
	wait "$srv" || true
	python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print("%.2f" % (d["end"]["sum_received"]["bits_per_second"]/1e9))' "$work/iperf.json"
}

# iperf_cpu: the last iperf3 run's client and server CPU together, % of a CPU per Gbit/s.
iperf_cpu() {
	python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); e=d["end"]; g=e["sum_received"]["bits_per_second"]/1e9; c=e["cpu_utilization_percent"]; print("%.2f" % ((c["host_total"]+c["remote_total"])/g) if g > 0 else "")' "$work/iperf.json"
}

# start_relay MTU NS:DEV:ADDR NS:DEV:ADDR [FLAG...]: cmd/tunrelay between two namespaces
# (GOMAXPROCS from RELAY_MAXPROCS when set), waiting until the second side has its address.
start_relay() {
	if [ -n "$RELAY_MAXPROCS" ]; then
		GOMAXPROCS=$RELAY_MAXPROCS "$work/tunrelay" -mtu "$1" -a "$2" -b "$3" "${@:4}" &
	else
		"$work/tunrelay" -mtu "$1" -a "$2" -b "$3" "${@:4}" &
	fi
	pids+=($!)
	local ns=${3%%:*} rest=${3#*:}
	local dev=${rest%%:*} ip=${rest#*:}
	for _ in $(seq 50); do ip -n "$ns" addr show dev "$dev" 2>/dev/null | grep -q "${ip%/*}" && break; sleep 0.1; done
}

all=(veth relay pibgw relay64k gso64k connected udp udpcm udpchain udpcrc)
names=()
for n in "${all[@]}"; do [[ " $SETUPS " == *" $n "* ]] && names+=("$n"); done
for n in $SETUPS; do
	[[ " ${all[*]} " == *" $n "* ]] || { echo "bench-ipoib: unknown setup $n in SETUPS (one of: ${all[*]})" >&2; exit 1; }
done
want() { [[ " ${names[*]} " == *" $1 "* ]]; }
declare -A client server addr procs

# veth
if want veth; then
a=bench-veth-a-$tag b=bench-veth-b-$tag
ip netns add "$a"; netns+=("$a"); ip netns add "$b"; netns+=("$b")
ip link add veth-a-$tag netns "$a" mtu "$MTU" type veth peer name veth-b-$tag netns "$b" mtu "$MTU"
ip -n "$a" addr add 10.77.1.1/24 dev veth-a-$tag; ip -n "$a" link set veth-a-$tag up
ip -n "$b" addr add 10.77.1.2/24 dev veth-b-$tag; ip -n "$b" link set veth-b-$tag up
client[veth]=$a server[veth]=$b addr[veth]=10.77.1.2
fi

# plain TUN relay
if want relay; then
a=bench-relay-a-$tag b=bench-relay-b-$tag
ip netns add "$a"; netns+=("$a"); ip netns add "$b"; netns+=("$b")
start_relay "$MTU" "$a:tr0:10.77.2.1/24" "$b:tr1:10.77.2.2/24"
procs[relay]=${pids[-1]}
client[relay]=$a server[relay]=$b addr[relay]=10.77.2.2
fi

# pibgw datagram mode
a=bench-pib-a-$tag b=bench-pib-b-$tag
cat >"$work/bench.toml" <<TOML
[daemon]
log_level = "warn"
max_procs = $PIBGW_MAXPROCS
attach = "none"
[fabric]
hca_count = 2
[[interfaces]]
name = "ib0"
hca = "pib_0"
netns = "$a"
addresses = ["10.77.3.1/24"]
[[interfaces]]
name = "ib1"
hca = "pib_1"
netns = "$b"
addresses = ["10.77.3.2/24"]
TOML
if want pibgw; then
netns+=("$a" "$b") # pibgw creates and removes them; listed so a crash is cleaned up too
"$work/pibgw" up --config "$work/bench.toml" --control "$work/pibgw.sock" &
pids+=($!) procs[pibgw]=$!
for _ in $(seq 100); do [ -S "$work/pibgw.sock" ] && ip -n "$b" addr show dev ib1 2>/dev/null | grep -q 10.77.3.2 && break; sleep 0.1; done
client[pibgw]=$a server[pibgw]=$b addr[pibgw]=10.77.3.2
fi

# Connected mode (RFC 4755) at MTU 65520, and the relay at the same MTU as its ceiling.
if want relay64k; then
a=bench-r64-a-$tag b=bench-r64-b-$tag
ip netns add "$a"; netns+=("$a"); ip netns add "$b"; netns+=("$b")
start_relay 65520 "$a:tr2:10.77.4.1/24" "$b:tr3:10.77.4.2/24"
procs[relay64k]=${pids[-1]}
client[relay64k]=$a server[relay64k]=$b addr[relay64k]=10.77.4.2
fi

if want gso64k; then
a=bench-g64-a-$tag b=bench-g64-b-$tag
ip netns add "$a"; netns+=("$a"); ip netns add "$b"; netns+=("$b")
start_relay 65520 "$a:tr4:10.77.8.1/24" "$b:tr5:10.77.8.2/24" -gso
procs[gso64k]=${pids[-1]}
client[gso64k]=$a server[gso64k]=$b addr[gso64k]=10.77.8.2
fi

a=bench-cm-a-$tag b=bench-cm-b-$tag
sed -e "s/bench-pib-a-$tag/$a/; s/bench-pib-b-$tag/$b/; s/10\.77\.3\./10.77.5./" \
	-e 's/^addresses = \(.*\)$/addresses = \1\nmode = "connected"/' "$work/bench.toml" >"$work/bench-cm.toml"
if want connected; then
netns+=("$a" "$b")
"$work/pibgw" up --config "$work/bench-cm.toml" --control "$work/pibgw-cm.sock" &
pids+=($!) procs[connected]=$!
for _ in $(seq 100); do [ -S "$work/pibgw-cm.sock" ] && ip -n "$b" addr show dev ib1 2>/dev/null | grep -q 10.77.5.2 && break; sleep 0.1; done
client[connected]=$a server[connected]=$b addr[connected]=10.77.5.2
fi

# Multi-host: a switch process on loopback and one `pibgw up` per host, each with one HCA
# plugged into it over a UDP link (no PSK: loopback is allowed by default).
if want udp || want udpcm; then
swport=$((20000 + tag % 20000))
"$work/pibgw" --log-level warn switch --listen "127.0.0.1:$swport" --control "$work/switch.sock" --ports 8 &
pids+=($!) swpid=$!
for _ in $(seq 50); do [ -S "$work/switch.sock" ] && break; sleep 0.1; done
# udp_host NAME NETNS GUIDBYTE ADDR MODE: one host of the multi-host fabric.
udp_host() {
	cat >"$work/$1.toml" <<TOML
[daemon]
log_level = "warn"
max_procs = $PIBGW_MAXPROCS
attach = "none"
[fabric]
hca_count = 1
node_guid_base = "0x0002c903${3}000000"
switch = "127.0.0.1:$swport"
[[interfaces]]
name = "ib0"
hca = "pib_0"
netns = "$2"
addresses = ["$4/24"]
mode = "$5"
TOML
	netns+=("$2")
	"$work/pibgw" up --config "$work/$1.toml" --control "$work/$1.sock" &
	pids+=($!)
}
fi
if want udp; then
	udp_host udp-a bench-udp-a-$tag 11 10.77.6.1 datagram
	udp_host udp-b bench-udp-b-$tag 12 10.77.6.2 datagram
	procs[udp]="$swpid ${pids[-2]} ${pids[-1]}"
	client[udp]=bench-udp-a-$tag server[udp]=bench-udp-b-$tag addr[udp]=10.77.6.2
fi
if want udpcm; then
	udp_host udpcm-a bench-udpcm-a-$tag 13 10.77.7.1 connected
	udp_host udpcm-b bench-udpcm-b-$tag 14 10.77.7.2 connected
	procs[udpcm]="$swpid ${pids[-2]} ${pids[-1]}"
	client[udpcm]=bench-udpcm-a-$tag server[udpcm]=bench-udpcm-b-$tag addr[udpcm]=10.77.7.2
fi
start_chain() { if [ -n "$RELAY_MAXPROCS" ]; then GOMAXPROCS=$RELAY_MAXPROCS "$work/tunrelay" "$@" & else "$work/tunrelay" "$@" & fi; pids+=($!); }
# udp_chain NAME NET PORT [FLAG...]: the UDP chain's three processes, 10.77.NET.1 → .2.
udp_chain() {
	local a=bench-$1-a-$tag b=bench-$1-b-$tag p=$3
	netns+=("$a" "$b") # tunrelay creates and removes them
	start_chain -forward "127.0.0.1:$p" -between "127.0.0.1:$((p + 1)),127.0.0.1:$((p + 2))" "${@:4}"
	start_chain -mtu 65520 -a "$a:ib0:10.77.$2.1/24" -udp "127.0.0.1:$((p + 1))" -peer "127.0.0.1:$p" "${@:4}"
	start_chain -mtu 65520 -a "$b:ib0:10.77.$2.2/24" -udp "127.0.0.1:$((p + 2))" -peer "127.0.0.1:$p" "${@:4}"
	procs[$1]="${pids[-3]} ${pids[-2]} ${pids[-1]}"
	client[$1]=$a server[$1]=$b addr[$1]=10.77.$2.2
}
ucport=$((40000 + tag % 8000))
if want udpchain; then udp_chain udpchain 9 "$ucport"; fi
if want udpcrc; then udp_chain udpcrc 10 $((ucport + 3)) -crc; fi
for n in udp udpcm udpchain udpcrc; do
	want $n || continue
	for _ in $(seq 200); do ip netns exec "${client[$n]}" ping -c 1 -W 1 "${addr[$n]}" >/dev/null 2>&1 && break; sleep 0.1; done
done

# Pings: warm up (neighbours, paths), then bursts of 50 in turn.
for n in "${names[@]}"; do
	ip netns exec "${client[$n]}" ping -c 3 -W 1 "${addr[$n]}" >/dev/null
	ip netns exec "${client[$n]}" ping -n -q -c 50 -i 0.005 "${addr[$n]}" >/dev/null
	: >"$work/rtt-$n"
done
for ((done_ = 0; done_ < PINGS; done_ += 50)); do
	c=$((PINGS - done_ < 50 ? PINGS - done_ : 50))
	for n in "${names[@]}"; do rtts "${client[$n]}" "${addr[$n]}" "$c" >>"$work/rtt-$n"; done
done

# cputicks PID...: each process's user and system CPU so far, in clock ticks, one per line.
cputicks() { for p in "$@"; do awk '{print $14 + $15}' "/proc/$p/stat" 2>/dev/null || echo 0; done; }
# systicks PID...: the system (kernel) CPU of all of them so far, in clock ticks.
systicks() { for p in "$@"; do awk '{print $15}' "/proc/$p/stat" 2>/dev/null || echo 0; done | awk '{s += $1} END {print s + 0}'; }
hz=$(getconf CLK_TCK)

# iperf3: one run per setup per round, in turn; the order alternates. Each run also
# records, per process of the setup, % of a CPU per Gbit/s over the run.
for n in "${names[@]}"; do : >"$work/tcp-$n"; : >"$work/cpu-$n"; : >"$work/sys-$n"; : >"$work/ipc-$n"; done
for ((r = 0; r < ROUNDS; r++)); do
	order=("${names[@]}")
	if ((r % 2 == 1)); then
		order=()
		for ((i = ${#names[@]} - 1; i >= 0; i--)); do order+=("${names[$i]}"); done
	fi
	for n in "${order[@]}"; do
		# shellcheck disable=SC2086 # procs holds a list of PIDs
		c0=$(cputicks ${procs[$n]:-}) s0=$(systicks ${procs[$n]:-})
		g=$(tcp_gbps "${client[$n]}" "${server[$n]}" "${addr[$n]}")
		# shellcheck disable=SC2086
		c1=$(cputicks ${procs[$n]:-}) s1=$(systicks ${procs[$n]:-})
		echo "$g" >>"$work/tcp-$n"
		iperf_cpu >>"$work/ipc-$n"
		paste <(echo "$c0") <(echo "$c1") | awk -v hz="$hz" -v d="$DURATION" -v g="$g" \
			'NF == 2 && g > 0 {printf "%.2f ", 100 * ($2 - $1) / hz / d / g} END {print ""}' >>"$work/cpu-$n"
		# the share of that CPU spent in the kernel
		paste <(echo "$c0") <(echo "$c1") | awk -v s="$((s1 - s0))" \
			'NF == 2 {c += $2 - $1} END {if (c > 0) printf "%.0f\n", 100 * s / c}' >>"$work/sys-$n"
	done
done

declare -A rtt tcp runs cpu cpuparts sys ipc
for n in "${names[@]}"; do
	rtt[$n]=$(median <"$work/rtt-$n") tcp[$n]=$(median <"$work/tcp-$n") runs[$n]=$(paste -sd/ "$work/tcp-$n")
	cpu[$n]=$(awk 'NF {s = 0; for (i = 1; i <= NF; i++) s += $i; print s}' "$work/cpu-$n" | median)
	[ "${cpu[$n]}" = nan ] && cpu[$n]=-
	sys[$n]=$(median <"$work/sys-$n") ipc[$n]=$(median <"$work/ipc-$n")
	[ "${sys[$n]}" = nan ] && sys[$n]=-
	[ "${ipc[$n]}" = nan ] && ipc[$n]=-
	parts=()
	for ((i = 1; i <= $(wc -w <<<"${procs[$n]:-}"); i++)); do parts+=("$(awk -v i="$i" 'NF {print $i}' "$work/cpu-$n" | median)"); done
	cpuparts[$n]=${parts[*]}
done

# ratio X Y: X/Y as "N.NN×", or "-" when Y is not measured.
ratio() { awk -v x="$1" -v y="$2" 'BEGIN{if (x == "" || y == "" || y + 0 == 0) print "-"; else printf "%.2f×", x/y}'; }
echo
echo "IPoIB datagram mode vs. its ceilings, MTU $MTU ($PINGS pings each, interleaved; iperf3 ${DURATION} s × $ROUNDS round(s); $(nproc) CPUs, relay GOMAXPROCS ${RELAY_MAXPROCS:-default}, pibgw max_procs $PIBGW_MAXPROCS; TCP ${TCP_CC:-$(cat /proc/sys/net/ipv4/tcp_congestion_control)})"
printf '%-10s %14s %12s %14s %12s %10s %8s %12s  %s\n' setup "ping p50 (ms)" "RTT/relay" "TCP (Gbit/s)" "TCP/relay" "CPU%/Gbit" "kernel%" "iperf3%/Gbit" "runs"
for n in "${names[@]}"; do
	printf '%-10s %14s %12s %14s %12s %10s %8s %12s  %s\n' "$n" "${rtt[$n]}" "$(ratio "${rtt[$n]}" "${rtt[relay]:-}")" \
		"${tcp[$n]}" "$(ratio "${tcp[$n]}" "${tcp[relay]:-}")" "${cpu[$n]}" "${sys[$n]}" "${ipc[$n]}" "${runs[$n]}"
done
echo "targets: pibgw RTT ≤ 1.5× relay, TCP ≥ 1.0× relay"
echo "connected mode (MTU 65520): TCP $(ratio "${tcp[connected]:-}" "${tcp[pibgw]:-}") datagram mode, $(ratio "${tcp[connected]:-}" "${tcp[relay64k]:-}") relay64k (targets: ≥ 1.5×, ≥ 1.0×), $(ratio "${tcp[connected]:-}" "${tcp[gso64k]:-}") gso64k"
echo "the TUN ceiling at MTU 65520: gso64k TCP $(ratio "${tcp[gso64k]:-}" "${tcp[pibgw]:-}") datagram mode, $(ratio "${tcp[relay64k]:-}" "${tcp[pibgw]:-}") for relay64k"
for n in udp udpcm udpchain udpcrc; do
	want $n || continue
	read -r s a b <<<"${cpuparts[$n]}"
	echo "$n CPU%/Gbit by process: switch $s, host A (sender) $a, host B (receiver) $b"
done
if want udpcm; then
	# How often host A's sends waited for a send-ring slot (the peer's ACKs through the
	# switch): its cm_tx_ring_full against the messages it sent, over the whole run.
	c=$("$work/pibgw" show --control "$work/udpcm-a.sock" ib0 2>/dev/null | tr -s ' ' '\n' | awk '
		prev == "cm_tx_ring_full" {full = $1} prev == "tx_cm_packets" {sent = $1} {prev = $1}
		END {if (sent > 0) printf "%d of %d messages (%.1f %%)", full, sent, 100 * full / sent}')
	echo "udpcm host A: sends that waited for a send-ring slot: ${c:-not read}"
fi
echo "multi-host over UDP links: datagram TCP $(ratio "${tcp[udp]:-}" "${tcp[pibgw]:-}") single-host, connected $(ratio "${tcp[udpcm]:-}" "${tcp[connected]:-}") single-host (targets: ≥ 0.5×, ≥ 0.5×)"
echo "the UDP ceiling at MTU 65520: udpchain TCP $(ratio "${tcp[udpchain]:-}" "${tcp[connected]:-}") single-host connected, udpcrc $(ratio "${tcp[udpcrc]:-}" "${tcp[connected]:-}"); udpcm $(ratio "${tcp[udpcm]:-}" "${tcp[udpchain]:-}") udpchain, $(ratio "${tcp[udpcm]:-}" "${tcp[udpcrc]:-}") udpcrc"

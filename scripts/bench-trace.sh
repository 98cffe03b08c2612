#!/usr/bin/env bash
# bench-trace.sh [BASE_REV] [ROUNDS] — the cost of the trace hooks with no one tracing:
# BenchmarkRCWriteBW/64KiB/loss=0 and BenchmarkUDSendRecv/64B of this tree against BASE_REV
# (default: the last commit before the hooks), test binaries built once each and run
# alternately ROUNDS times (default 9) on the same machine, medians compared.
set -euo pipefail
cd "$(dirname "$0")/.."
base=${1:-$(git log --format=%H -1 --grep='^trace: a per-process ring')~1}
rounds=${2:-9}
work=$(mktemp -d "${TMPDIR:-/tmp}/pibgw-bench-trace.XXXXXX")
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/base"
git archive "$base" | tar -x -C "$work/base"
for pkg in rc ud; do
	(cd "$work/base" && CGO_ENABLED=0 go test -c -o "$work/base-$pkg.test" "./$pkg")
	CGO_ENABLED=0 go test -c -o "$work/new-$pkg.test" "./$pkg"
done
run() { # tree pkg bench
	"$work/$1-$2.test" -test.run '^$' -test.bench "$3" -test.benchmem -test.count 1 -test.benchtime "${BENCHTIME:-1s}" |
		awk -v b="$3" '$1 ~ /^Benchmark/ { for (i = 2; i < NF; i++) if ($(i+1) == "ns/op") print $i }'
}
for ((r = 1; r <= rounds; r++)); do
	for tree in base new; do
		run "$tree" rc 'BenchmarkRCWriteBW/64KiB/loss=0$' >>"$work/$tree-rc.ns"
		run "$tree" ud 'BenchmarkUDSendRecv/64B$' >>"$work/$tree-ud.ns"
	done
done
median() { sort -g "$1" | awk '{ a[NR] = $1 } END { print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }
spread() { sort -g "$1" | awk '{ a[NR] = $1 } END { printf "%.0f..%.0f", a[1], a[NR] }'; }
printf 'base %s, %d rounds each, alternating\n' "$(git rev-parse --short "$base")" "$rounds"
for pkg in rc ud; do
	b=$(median "$work/base-$pkg.ns")
	n=$(median "$work/new-$pkg.ns")
	printf '%-24s base %9.1f ns/op (%s)  tracing compiled in, off %9.1f ns/op (%s)  ratio %.3f\n' \
		"$([[ $pkg == rc ]] && echo 'RCWriteBW/64KiB/loss=0' || echo 'UDSendRecv/64B')" "$b" "$(spread "$work/base-$pkg.ns")" \
		"$n" "$(spread "$work/new-$pkg.ns")" "$(awk -v a="$n" -v b="$b" 'BEGIN { print a / b }')"
done

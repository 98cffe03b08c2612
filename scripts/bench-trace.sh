#!/usr/bin/env bash
# bench-trace.sh [BASE_REV|strip] [ROUNDS] — the cost of the debugging hooks with no one
# tracing: BenchmarkRCWriteBW/64KiB/loss=0 and BenchmarkUDSendRecv/64B of this tree against
# BASE_REV (default: the last commit before the hooks), or with "strip" against this very
# tree with the hooks compiled out (trace.On a constant false, so the compiler drops every
# hook's body; the per-post pitfall checks return at once), test binaries built once each
# and run alternately ROUNDS times (default 9) on the same machine, medians compared. CPU=1
# runs them at GOMAXPROCS 1, which takes the scheduler's cross-core placement (a 2x bimodal
# spread in UDSendRecv on a 2-core machine) out of the comparison; BENCHTIME sets -test.benchtime.
set -euo pipefail
cd "$(dirname "$0")/.."
base=${1:-$(git log --format=%H -1 --grep='^trace: a per-process ring')~1}
rounds=${2:-9}
work=$(mktemp -d "${TMPDIR:-/tmp}/pibgw-bench-trace.XXXXXX")
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/base"
if [[ $base == strip ]]; then
	git archive HEAD | tar -x -C "$work/base"
	sed -i 's/^func On() bool { return on.Load() }$/func On() bool { return false }/' "$work/base/trace/trace.go"
	grep -q 'func On() bool { return false }' "$work/base/trace/trace.go"
	perl -pi -e 's/^(func \(qp \*QP\) checkPost(Send|Recv)\(.*\{)$/$1\n\treturn nil/' "$work/base/hca/manner_checks.go"
	[[ $(grep -c '^	return nil$' "$work/base/hca/manner_checks.go") -ge 2 ]]
	perl -pi -e 's/^\tif !\(qp\.typ == QPTypeUD && len\(wrs\) == 1 .*\{$/\tif false {/; s/^\tif !\(len\(wrs\) == 1 && len\(wrs\[0\]\.SGL\) == 1 .*\{$/\tif false {/' "$work/base/hca/post.go"
	[[ $(grep -c '^	if false {$' "$work/base/hca/post.go") -eq 2 ]]
	label="$(git rev-parse --short HEAD) with the hooks compiled out"
else
	label=$(git rev-parse --short "$base")
	git archive "$base" | tar -x -C "$work/base"
fi
for pkg in rc ud; do
	(cd "$work/base" && CGO_ENABLED=0 go test -c -o "$work/base-$pkg.test" "./$pkg")
	CGO_ENABLED=0 go test -c -o "$work/new-$pkg.test" "./$pkg"
done
run() { # tree pkg bench
	"$work/$1-$2.test" -test.run '^$' -test.bench "$3" -test.benchmem -test.count 1 -test.benchtime "${BENCHTIME:-1s}" ${CPU:+-test.cpu "$CPU"} |
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
printf 'base %s, %d rounds each, alternating%s\n' "$label" "$rounds" "${CPU:+, GOMAXPROCS $CPU}"
for pkg in rc ud; do
	b=$(median "$work/base-$pkg.ns")
	n=$(median "$work/new-$pkg.ns")
	printf '%-24s base %9.1f ns/op (%s)  hooks in, tracing off %9.1f ns/op (%s)  ratio %.3f\n' \
		"$([[ $pkg == rc ]] && echo 'RCWriteBW/64KiB/loss=0' || echo 'UDSendRecv/64B')" "$b" "$(spread "$work/base-$pkg.ns")" \
		"$n" "$(spread "$work/new-$pkg.ns")" "$(awk -v a="$n" -v b="$b" 'BEGIN { print a / b }')"
done

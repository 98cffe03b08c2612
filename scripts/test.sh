#!/usr/bin/env bash
# The one test command of pibgw: installs the tools the interop tests need (when root),
# then gofmt check, go vet, go test, and a short fuzz smoke of the wire parsers.
#
#   bash scripts/test.sh
#
# Environment:
#   FUZZTIME=10s          fuzz time per target; 0 skips fuzzing (acceptance runs use 60s)
#   GO_TEST_TIMEOUT=15m   go test -timeout (per test binary). The longest packages are the
#                         end-to-end ones (e2e/verbs ~140 s, e2e/multihost ~95 s, e2e/ipoib
#                         ~90 s, e2e/mgmt ~60 s on a quiet two-core machine; about five times
#                         that was measured with the machine twelve times oversubscribed):
#                         15m is twice what e2e/verbs takes beside two CPU-bound processes
#   GO_TEST_P=1           packages tested at once (go test -p): one, because the end-to-end,
#                         attach and C-library tests time real processes and measure the
#                         daemon's memory, which other packages' tests running beside them on a
#                         two-core machine disturb
#   PIBGW_RACE=1          run go test with the race detector as well
#   PIBGW_SKIP_INSTALL=1  do not install missing tools (their tests skip)
#
# Exits non-zero if any step fails; every step runs, and a summary closes the output.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

FUZZTIME=${FUZZTIME:-10s}
GO_TEST_TIMEOUT=${GO_TEST_TIMEOUT:-15m}
GO_TEST_P=${GO_TEST_P:-1}
PIBGW_RACE=${PIBGW_RACE:-0}
PIBGW_SKIP_INSTALL=${PIBGW_SKIP_INSTALL:-0}

# Tools the interop tests run, and the Debian package that provides each. Tests skip with a
# printed reason when a tool is missing; add a row when a test starts using a new tool.
# A row whose first word is a path (headers) is checked as a file instead of a command.
TOOLS=(
	"tshark tshark"
	"iperf3 iperf3"
	"ping iputils-ping"
	"ethtool ethtool"
	"/usr/include/infiniband/verbs.h libibverbs-dev"
	"ibv_devinfo ibverbs-utils"
	"ib_write_bw perftest"
	"/usr/include/rdma/rdma_cma.h librdmacm-dev"
	"/usr/include/infiniband/umad.h libibumad-dev"
	"rping rdmacm-utils"
	"opensm opensm"
	"ibsim ibsim-utils"
	"/usr/lib/x86_64-linux-gnu/umad2sim/libumad2sim.so libumad2sim0"
	"ibnetdiscover infiniband-diags"
	"ucx_perftest ucx-utils"
	"mpirun openmpi-bin"
	"/usr/lib/x86_64-linux-gnu/openmpi/include/mpi.h libopenmpi-dev"
	"fi_pingpong libfabric-bin"
	"qperf qperf"
	"/usr/lib/python3/dist-packages/pyverbs/__init__.py python3-pyverbs"
)
# Fuzz targets: package and function.
FUZZ=(
	"./wire FuzzParsePacket"
	"./wire FuzzParseMAD"
	"./wire FuzzFinalize"
	"./wire FuzzVCRC"
	"./wire FuzzPayloadRef"
	"./rdmacm/ibcm FuzzHandle"
	"./internal/fuzztest FuzzPortReceive"
	"./internal/fuzztest FuzzSwitchReceive"
	"./internal/shmring FuzzConsumer"
	"./trace FuzzDecode"
	"./internal/ibsim FuzzDatagrams"
	"./fabric/udplink FuzzReceive"
	"./fabric/topology FuzzParse"
	"./internal/csum FuzzSum"
	"./attach FuzzControl"
	"./sa FuzzSAQuery"
)

logdir=$(mktemp -d "${TMPDIR:-/tmp}/pibgw-test.XXXXXX")
start=$(date +%s)
results=()
failed=0

# record STATUS NAME SECONDS [NOTE]
record() {
	local line
	line=$(printf '  %-4s  %-26s %5ss' "$1" "$2" "$3")
	if [[ -n ${4:-} ]]; then
		line+="  $4"
	fi
	results+=("$line")
	if [[ $1 == FAIL ]]; then
		failed=1
	fi
}

step() { printf '\n==> %s\n' "$*"; }

if ! command -v go >/dev/null 2>&1; then
	echo "test.sh: go is not on PATH; install Go 1.26 or newer" >&2
	exit 1
fi
echo "pibgw tests: $(go version), $(nproc 2>/dev/null || echo '?') CPUs, logs in $logdir"

# --- tools -------------------------------------------------------------------------------
step "tools"
t0=$(date +%s)
missing=()
for row in "${TOOLS[@]}"; do
	read -r tool pkg <<<"$row"
	if [[ $tool == /* && -e $tool ]]; then
		echo "$tool: present"
	elif [[ $tool != /* ]] && command -v "$tool" >/dev/null 2>&1; then
		echo "$tool: $(command -v "$tool")"
	else
		missing+=("$pkg")
	fi
done
if ((${#missing[@]} == 0)); then
	record PASS "tools" $(($(date +%s) - t0)) "all present"
elif [[ $PIBGW_SKIP_INSTALL == 1 ]]; then
	echo "missing: ${missing[*]}; PIBGW_SKIP_INSTALL=1, so the interop tests that need them will skip"
	record SKIP "tools" $(($(date +%s) - t0)) "not installed: ${missing[*]} (interop tests skip)"
elif [[ $(id -u) -ne 0 ]]; then
	echo "missing: ${missing[*]}; not root, so not installing them: the interop tests that need them will skip"
	echo "(as root this script runs: apt-get install ${missing[*]})"
	record SKIP "tools" $(($(date +%s) - t0)) "not root, not installed: ${missing[*]} (interop tests skip)"
else
	echo "installing: ${missing[*]}"
	if apt-get update >"$logdir/apt.log" 2>&1 &&
		DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}" >>"$logdir/apt.log" 2>&1; then
		record PASS "tools" $(($(date +%s) - t0)) "installed ${missing[*]}"
	else
		tail -n 20 "$logdir/apt.log"
		echo "apt-get failed (full log: $logdir/apt.log); PIBGW_SKIP_INSTALL=1 runs without these tools"
		record FAIL "tools" $(($(date +%s) - t0)) "apt-get install ${missing[*]} failed"
	fi
fi

# --- gofmt -------------------------------------------------------------------------------
step "gofmt -l ."
t0=$(date +%s)
unformatted=$(gofmt -l . 2>&1 || true)
if [[ -z $unformatted ]]; then
	record PASS "gofmt" $(($(date +%s) - t0))
else
	echo "$unformatted"
	record FAIL "gofmt" $(($(date +%s) - t0)) "$(wc -l <<<"$unformatted") file(s) need gofmt"
fi

# --- go vet ------------------------------------------------------------------------------
step "go vet ./..."
t0=$(date +%s)
if go vet ./...; then
	record PASS "go vet" $(($(date +%s) - t0))
else
	record FAIL "go vet" $(($(date +%s) - t0))
fi

# --- C libraries -------------------------------------------------------------------------
# pibgw's libibverbs.so.1 (cgo, rdma-core's headers) into build/lib, for pibgw exec; the
# cabi tests build their own copy. The package has a build tag, so vet it with the tag.
step "bash scripts/build-libs.sh; go vet -tags pibgw_cabi ./cabi/..."
t0=$(date +%s)
if [[ ! -f /usr/include/infiniband/verbs.h ]]; then
	echo "rdma-core's headers are missing (libibverbs-dev): not building the C libraries"
	record SKIP "C libraries" $(($(date +%s) - t0)) "no libibverbs-dev headers (cabi tests skip)"
elif bash scripts/build-libs.sh && go vet -tags pibgw_cabi ./cabi/...; then
	record PASS "C libraries" $(($(date +%s) - t0)) "build/lib"
else
	record FAIL "C libraries" $(($(date +%s) - t0))
fi

# --- go test -----------------------------------------------------------------------------
# testlog KIND reads go test -v output and prints the tests that ended in "--- KIND" (SKIP
# or FAIL), each with the log lines it wrote (which go test prints before the verdict).
# For FAIL it also prints every line that belongs to no test: build errors, panics and
# their stacks, package FAIL lines.
testlog() {
	awk -v kind="$1" '
		/^=== (RUN|PAUSE|CONT|NAME)/ { buf = ""; next }
		$0 ~ "^ *--- " kind ":" { printf "%s\n%s", $0, buf; buf = ""; next }
		/^ *--- (PASS|SKIP|FAIL):/ { buf = ""; next }
		/^    / { buf = buf $0 "\n"; next }
		/^(PASS|FAIL|ok |\?)/ { if (kind == "FAIL" && /^FAIL/) print; next }
		{ if (kind == "FAIL") print }
	'
}

# run_tests NAME [go test flags]: streams package results and skips, keeps the -v log, and
# on failure prints the failing tests' output.
run_tests() {
	local name=$1
	shift
	local log="$logdir/${name// /-}.log"
	step "go test -count=1 -p $GO_TEST_P -timeout $GO_TEST_TIMEOUT${*:+ $*} ${PKGS:-./...}  (full -v log: $log)"
	local t0 st
	t0=$(date +%s)
	set +e
	# shellcheck disable=SC2086 # PKGS is a list of package patterns
	go test -count=1 -p "$GO_TEST_P" -timeout "$GO_TEST_TIMEOUT" -v "$@" ${PKGS:-./...} 2>&1 | tee "$log" |
		grep --line-buffered -E '^(ok |FAIL|\?|--- FAIL|panic:)'
	st=${PIPESTATUS[0]}
	set -e
	local pkgs skips
	pkgs=$(grep -cE '^ok ' "$log" || true)
	skips=$(grep -cE '^\s*--- SKIP' "$log" || true)
	if ((skips > 0)); then
		echo "skipped tests and why:"
		testlog SKIP <"$log" | sed 's/^/  /'
	fi
	if ((st == 0)); then
		record PASS "$name" $(($(date +%s) - t0)) "$pkgs packages ok, $skips tests skipped"
	else
		echo
		echo "failures (from $log):"
		# The whole failure output goes to a file first: `head` closing the pipe early
		# would kill the script with SIGPIPE (pipefail) before its summary.
		testlog FAIL <"$log" >"$log.failures" || true
		sed -n '1,400p' "$log.failures"
		record FAIL "$name" $(($(date +%s) - t0)) "exit $st; $pkgs packages ok, see $log"
	fi
}

run_tests "go test"
# The verbs tests again, every device used through the attach channel by its own session
# (hcatest's PIBGW_TEST_ATTACHED), as processes use the daemon's HCAs.
PKGS="./rc ./ud" PIBGW_TEST_ATTACHED=1 run_tests "go test (attached devices)"
if [[ $PIBGW_RACE == 1 ]]; then
	run_tests "go test -race" -race
fi

# --- fuzz smoke --------------------------------------------------------------------------
for row in "${FUZZ[@]}"; do
	read -r pkg fn <<<"$row"
	if [[ $FUZZTIME == 0 ]]; then
		record SKIP "fuzz $fn" 0 "FUZZTIME=0"
		continue
	fi
	if ! grep -qsE "^func $fn\(" "$pkg"/*_test.go; then
		echo "fuzz target $fn not found in $pkg; skipping it"
		record SKIP "fuzz $fn" 0 "not defined in $pkg yet"
		continue
	fi
	step "go test $pkg -run '^\$' -fuzz '^$fn\$' -fuzztime $FUZZTIME"
	t0=$(date +%s)
	fuzz_ok() { go test "$pkg" -run '^$' -fuzz "^$fn\$" -fuzztime "$FUZZTIME" 2>&1 | tee "$logdir/fuzz-$fn.log" | tail -n 3; }
	passed=0
	for try in 1 2 3; do
		if fuzz_ok; then
			passed=1
			break
		fi
		# Go's fuzzing coordinator sometimes misses its own deadline on a loaded machine
		# ("context deadline exceeded", no failing input): not a finding; run it again,
		# up to three times (twice in a row was seen on this machine). Anything else, or a
		# failing input, fails at once.
		if ! grep -q "context deadline exceeded" "$logdir/fuzz-$fn.log" || grep -q "Failing input" "$logdir/fuzz-$fn.log"; then
			break
		fi
		echo "fuzz $fn: the coordinator missed its deadline (no failing input); running it again"
	done
	if [[ $passed == 1 ]]; then
		record PASS "fuzz $fn" $(($(date +%s) - t0)) "$FUZZTIME"
	else
		tail -n 40 "$logdir/fuzz-$fn.log"
		echo "a failing input, if any, is under $pkg/testdata/fuzz/$fn/ (log: $logdir/fuzz-$fn.log)"
		record FAIL "fuzz $fn" $(($(date +%s) - t0))
	fi
done

# --- summary -----------------------------------------------------------------------------
total=$(($(date +%s) - start))
echo
echo "==> summary"
printf '%s\n' "${results[@]}"
if ((failed)); then
	echo "FAILED after ${total}s (logs: $logdir)"
	exit 1
fi
echo "all passed in ${total}s"

#!/usr/bin/env bash
# The hostile-user run (docs/security.md): a local user without privileges (nobody) attacks
# a running daemon every way it can at once — 20,000 attach connections, 30,000 QP numbers,
# broadcast join-and-exit, IPoIB-CM service IDs, starving the ibsim server, 20,000 IPv6
# destinations, beside a capture nobody reads — while ping -f and an honest
# ibv_rc_pingpong go on; then the heavy variants of the attach tests. Needs root.
#
#   bash scripts/abuse.sh
#
# Takes about two minutes on a quiet two-core machine. Exits non-zero if any check fails.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

if [ "$(id -u)" != 0 ]; then
	echo "abuse.sh: run as root: the test makes namespaces and TUN devices, and runs its attackers as user nobody" >&2
	exit 1
fi
# What the run uses, and the Debian package of each.
need=()
for row in "ping iputils-ping" "setpriv util-linux" "ibv_rc_pingpong ibverbs-utils" \
	"/usr/include/infiniband/verbs.h libibverbs-dev" "/usr/include/rdma/rdma_cma.h librdmacm-dev"; do
	set -- $row
	if [ "${1#/}" != "$1" ]; then [ -e "$1" ] || need+=("$2"); else command -v "$1" >/dev/null || need+=("$2"); fi
done
if [ ${#need[@]} -gt 0 ]; then
	echo "abuse.sh: installing ${need[*]}"
	DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${need[@]}" >/dev/null
fi

status=0
PIBGW_ABUSE=1 go test -count=1 -v -timeout 20m -run '^TestAbuse$' ./e2e/abuse || status=1
PIBGW_ABUSE=1 go test -count=1 -timeout 20m -run '^(TestAbuseConnections|TestQPNAllocationConstantTime)$' ./attach || status=1
exit $status

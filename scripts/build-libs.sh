#!/usr/bin/env bash
# Builds pibgw's C libraries into DIR (default build/lib):
#
#   libibverbs.so.1   libibverbs for unmodified programs (ibv_devinfo, the pingpongs,
#                     perftest): their verbs run on a pibgw daemon's HCAs through the
#                     attach socket ($PIBGW_ATTACH, else /run/pibgw/attach.sock)
#
#   bash scripts/build-libs.sh [DIR]
#
# Needs cgo (gcc) and rdma-core's headers (Debian: libibverbs-dev), which give the
# structures their real layouts. Run programs with `pibgw exec -- CMD`, or with
# LD_LIBRARY_PATH=DIR.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
out=${1:-$root/build/lib}
mkdir -p "$out"
out=$(cd "$out" && pwd)

if [[ ! -f /usr/include/infiniband/verbs.h ]]; then
	echo "build-libs.sh: /usr/include/infiniband/verbs.h is missing (Debian: apt-get install libibverbs-dev)" >&2
	exit 1
fi

cd "$root"
src=cabi/ibverbs
CGO_ENABLED=1 go build -tags pibgw_cabi -buildmode=c-shared -trimpath \
	-ldflags "-s -extldflags '-Wl,--version-script=$root/$src/libibverbs.map -Wl,-soname,libibverbs.so.1'" \
	-o "$out/libibverbs.so.1" "./$src"
rm -f "$out/libibverbs.so.h" "$out/libibverbs.h"
ln -sf libibverbs.so.1 "$out/libibverbs.so"
echo "built $out/libibverbs.so.1"

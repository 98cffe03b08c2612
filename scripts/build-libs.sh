#!/usr/bin/env bash
# Builds pibgw's C libraries into DIR (default build/lib):
#
#   libibverbs.so.1   libibverbs for unmodified programs (ibv_devinfo, the pingpongs,
#                     perftest): their verbs run on a pibgw daemon's HCAs through the
#                     attach socket ($PIBGW_ATTACH, else /run/pibgw/attach.sock); C
#                     (cabi/libibverbs) over its Go side, libpibgw_verbs.so (cabi/ibverbs),
#                     loaded at the first verb
#   umad/libibumad.so.3  libibumad for unmodified libibumad programs (infiniband-diags,
#                     opensm, perftest's -g): plain C, a client of the daemon's ibsim
#                     server doing the kernel MAD layer's part (agents, timeouts, RMPP);
#                     in its own directory, which `pibgw exec --umad` puts first
#   librdmacm.so.1    librdmacm for unmodified rdma_cm programs (rping, ucmatose, udaddy,
#                     rdma_server/rdma_client): plain C over libibverbs.so.1 above, which
#                     runs their rdma_cm calls (package rdmacm) in its Go runtime
#
#   bash scripts/build-libs.sh [DIR]
#
# Needs cgo (gcc) and rdma-core's headers (Debian: libibverbs-dev; librdmacm-dev for
# librdmacm.so.1 and libibumad-dev for libibumad.so.3, each skipped with a message without it), which give the
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
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# The Go side (package cabi/ibverbs) is its own library, which libibverbs.so.1 loads at
# the first call that needs it (cabi/libibverbs/lazy.c), so that a program that forks
# before its first verb has children that can use verbs. -Bsymbolic: it binds its own
# functions, which libibverbs.so.1's wrappers share the names of.
CGO_ENABLED=1 go build -tags pibgw_cabi -buildmode=c-shared -trimpath \
	-ldflags "-s -extldflags '-Wl,-soname,libpibgw_verbs.so -Wl,-Bsymbolic'" \
	-o "$out/libpibgw_verbs.so" ./cabi/ibverbs
mv "$out/libpibgw_verbs.h" "$tmp/pibgw_go.h"
awk -f cabi/libibverbs/lazy.awk "$tmp/pibgw_go.h" > "$tmp/lazy_gen.c"
src=cabi/libibverbs
gcc -shared -fPIC -O2 -Wall -Wno-unused-parameter -Wno-unused-function -fvisibility=hidden \
	-I"$tmp" -Icabi/ibverbs -o "$out/libibverbs.so.1" \
	"$src/pib.c" "$src/misc.c" "$src/lazy.c" "$tmp/lazy_gen.c" \
	-Wl,--version-script="$src/libibverbs.map" -Wl,-soname,libibverbs.so.1 -Wl,--no-undefined -ldl -lpthread
ln -sf libibverbs.so.1 "$out/libibverbs.so"
echo "built $out/libibverbs.so.1 (and its Go side, libpibgw_verbs.so)"

if [[ ! -f /usr/include/infiniband/umad.h ]]; then
	echo "build-libs.sh: /usr/include/infiniband/umad.h is missing (Debian: apt-get install libibumad-dev): libibumad.so.3 not built" >&2
else
	src=cabi/libibumad
	mkdir -p "$out/umad"
	gcc -shared -fPIC -O2 -Wall -Wno-unused-parameter -fvisibility=hidden -o "$out/umad/libibumad.so.3" "$src/umad.c" \
		-Wl,--version-script="$src/libibumad.map" -Wl,-soname,libibumad.so.3 -Wl,--no-undefined -lpthread
	echo "built $out/umad/libibumad.so.3"
fi

if [[ ! -f /usr/include/rdma/rdma_cma.h ]]; then
	echo "build-libs.sh: /usr/include/rdma/rdma_cma.h is missing (Debian: apt-get install librdmacm-dev): librdmacm.so.1 not built" >&2
	exit 0
fi
src=cabi/rdmacm
gcc -shared -fPIC -O2 -Wall -Wno-unused-parameter -fvisibility=hidden -o "$out/librdmacm.so.1" "$src/cma.c" "$src/rsocket.c" \
	-Wl,--version-script="$src/librdmacm.map" -Wl,-soname,librdmacm.so.1 -Wl,--no-undefined \
	-L"$out" -l:libibverbs.so.1 -lpthread
ln -sf librdmacm.so.1 "$out/librdmacm.so"
echo "built $out/librdmacm.so.1"

#!/usr/bin/env bash
# Builds the pibgw binary into ./pibgw (or OUT), stamped with the source revision that
# `pibgw --version` prints (git describe; Go's own VCS stamp needs git at build time and
# is missing from builds outside a work tree), static (CGO_ENABLED=0).
#
#   bash scripts/build.sh [OUT]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
out=${1:-pibgw}
rev=$(git describe --always --dirty 2>/dev/null || echo unknown)
CGO_ENABLED=0 go build -ldflags "-X main.revision=$rev" -o "$out" ./cmd/pibgw
echo "built $out (revision $rev)"

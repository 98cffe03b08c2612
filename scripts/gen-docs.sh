#!/usr/bin/env bash
# Regenerates the generated documentation from the code: docs/man/, the man pages, from the
# CLI's own command definitions (`pibgw man --dir`). TestManPagesCurrent (cmd/pibgw) fails
# when docs/man/ is not what the current CLI generates; run this script and commit the result.
#
#   bash scripts/gen-docs.sh
#   man -l docs/man/pibgw.1        # read one
set -euo pipefail
cd "$(dirname "$0")/.."
CGO_ENABLED=0 go run ./cmd/pibgw man --dir docs/man
echo "docs/man: $(ls docs/man | wc -l) pages"

#!/usr/bin/env bash
# Heap allocations acceld makes per Allocate + GetPreferredAllocation round trip: acceld runs
# under valgrind twice, driven by bench-acceld with 10 and with 1010 calls of each; the
# difference in valgrind's "total heap usage" divided by 1000 is the per-call cost, free of
# start-up and shutdown.
#   bash bench/acceld-allocs.sh [BUILD_DIR]
set -euo pipefail
build=${1:-build}
here=$(cd "$(dirname "$0")" && pwd)
command -v valgrind >/dev/null || { echo "bench/acceld-allocs.sh: needs valgrind" >&2; exit 1; }
tmp=$(mktemp -d /tmp/acceld-allocs-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
declare -A allocs frees
for n in 10 1010; do
    ACCELD_WRAPPER="valgrind --log-file=$tmp/vg-$n.txt" \
        bash "$here/acceld.sh" "$build" "$n" 0 >"$tmp/bench-$n.txt" 2>&1
    line=$(grep 'total heap usage' "$tmp/vg-$n.txt")
    allocs[$n]=$(echo "$line" | sed -E 's/.*usage: ([0-9,]+) allocs.*/\1/' | tr -d ,)
    frees[$n]=$(echo "$line" | sed -E 's/.* ([0-9,]+) frees.*/\1/' | tr -d ,)
    echo "calls=$n: ${allocs[$n]} allocs, ${frees[$n]} frees"
done
awk -v a="${allocs[1010]}" -v b="${allocs[10]}" \
    'BEGIN { printf "per Allocate + GetPreferredAllocation round trip: %.1f heap allocations\n", (a - b) / 1000 }'

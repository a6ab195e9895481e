#!/usr/bin/env bash
# make e2e: the end-to-end suite against the test cluster (make cluster). Runs each scenario
# (tests/e2e/[0-9]*.sh, in name order, or those named on the command line), numbers their TAP
# lines, and ends with "N passed, N failed, N skipped". A cluster that is not up is a failure,
# never a skip. Each scenario's output is also kept in build/cluster/logs/e2e-NAME.log.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"

echo "TAP version 13"
if ! [ -x "$E2E_CLUSTER/kubectl" ] || ! kubectl get --raw /readyz >/dev/null 2>&1; then
    echo "not ok 1 - the test cluster is up (run make cluster first; its logs: $E2E_CLUSTER/logs/)"
    echo "1..1"
    echo "0 passed, 1 failed, 0 skipped"
    exit 1
fi

# setup.sh first (the images imported, the node labelled), then the scenarios
if [ $# -gt 0 ]; then
    scenarios=("$here/setup.sh" "$@")
else
    scenarios=("$here/setup.sh" "$here"/[0-9]*.sh)
fi
n=0 passed=0 failed=0 skipped=0
t0=$(date +%s)
mkdir -p "$E2E_CLUSTER/logs"
for s in "${scenarios[@]}"; do
    name=$(basename "$s" .sh)
    echo "# scenario $name"
    start=$(date +%s)
    bad=0
    while IFS= read -r line; do
        case "$line" in
        "ok - "* | "not ok - "*)
            n=$((n + 1))
            result=${line%% - *}
            desc=${line#* - }
            if [ "$result" = ok ]; then
                case "$desc" in *"# SKIP"*) skipped=$((skipped + 1)) ;; *) passed=$((passed + 1)) ;; esac
            else
                failed=$((failed + 1)) bad=1
            fi
            echo "$result $n - $name: $desc"
            ;;
        "#e2e-exit "*)
            # a scenario that died (or ran past 15 min) without saying why still fails
            rc=${line#\#e2e-exit }
            if [ "$rc" != 0 ] && [ $bad -eq 0 ]; then
                n=$((n + 1)) failed=$((failed + 1))
                echo "not ok $n - $name: the scenario exited with status $rc"
            fi
            ;;
        "#"*) echo "$line" ;;
        # anything else a scenario prints is a comment, so the stream stays TAP (a pod's "ok"
        # line never counts as a test)
        *) echo "# $line" ;;
        esac
    done < <({
        timeout 900 bash "$s" 2>&1
        echo "#e2e-exit $?"
    } | tee "$E2E_CLUSTER/logs/e2e-$name.log")
    echo "# scenario $name: $(($(date +%s) - start)) s"
done
echo "1..$n"
echo "# e2e wall time: $(($(date +%s) - t0)) s"
[ "$n" -gt 0 ] || failed=$((failed + 1))
echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]

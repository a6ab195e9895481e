#!/usr/bin/env bash
# set-runbook-base — prints accel's rule file with every alert's runbook_url pointing at BASE
# (where your copy of docs/runbooks.md is served: a wiki page, your fork, an internal Git
# host) instead of the default. The section anchors stay as they are.
#
#   deploy/prometheus/set-runbook-base.sh https://git.example.com/gpu/accel/-/blob/main/docs/runbooks.md \
#       > /etc/prometheus/rules/accel-rules.yml
#
# usage: set-runbook-base.sh BASE [RULE_FILE]   (RULE_FILE defaults to accel-rules.yml here)
set -euo pipefail
DEFAULT_BASE=https://github.com/accel/accel/blob/main/docs/runbooks.md
if [ $# -lt 1 ] || [ $# -gt 2 ] || [ "$1" = -h ] || [ "$1" = --help ]; then
    sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2
fi
base=$1
rules=${2:-"$(dirname "$0")/accel-rules.yml"}
case "$base" in
    http://*|https://*) ;;
    *) echo "set-runbook-base: BASE must be an http(s) URL, got '$base'" >&2; exit 2 ;;
esac
if [[ "$base" == *[[:space:]\#]* ]]; then
    echo "set-runbook-base: BASE must hold no spaces and no '#' (the anchor is appended)" >&2
    exit 2
fi
[ -r "$rules" ] || { echo "set-runbook-base: cannot read $rules" >&2; exit 2; }
# literal (not regex) replacement of "runbook_url: DEFAULT_BASE#"
awk -v old="runbook_url: $DEFAULT_BASE#" -v new="runbook_url: ${base%/}#" '{
    i = index($0, old)
    if (i) $0 = substr($0, 1, i - 1) new substr($0, i + length(old))
    print
}' "$rules"

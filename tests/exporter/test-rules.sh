#!/usr/bin/env bash
# test-rules — deploy/prometheus/*.yml: `promtool check rules` clean, `promtool test rules`
# passes tests/exporter/rules-test.yml (firing and silent cases per alert), every alert has a
# runbook_url whose anchor is a section of docs/runbooks.md. TAP; 77 without promtool.
set -u
src=${ACCEL_SOURCE_ROOT:-.}
command -v promtool >/dev/null || { echo "1..0 # SKIP promtool missing (scripts/deps.sh installs prometheus)"; exit 77; }
echo "1..3"
fail=0
if out=$(promtool check rules "$src"/deploy/prometheus/*.yml 2>&1); then echo "ok 1 - promtool check rules"
else echo "not ok 1 - promtool check rules"; echo "$out" | sed 's/^/# /'; fail=1; fi
if out=$(cd "$src/tests/exporter" && promtool test rules rules-test.yml 2>&1); then echo "ok 2 - promtool test rules"
else echo "not ok 2 - promtool test rules"; echo "$out" | sed 's/^/# /'; fail=1; fi
# GitHub anchors: the heading lower-cased; alert names are letters only.
missing=""
alerts=$(grep -ho 'alert: [A-Za-z]*' "$src"/deploy/prometheus/*.yml | awk '{print $2}')
for a in $alerts; do
    url=$(awk -v a="alert: $a" '$0 ~ a"$" {f=1} f && /runbook_url:/ {print $2; exit}' "$src"/deploy/prometheus/*.yml)
    anchor=${url##*#}
    [ -n "$url" ] || { missing="$missing $a(no runbook_url)"; continue; }
    grep -qi "^## ${anchor}\b" "$src/docs/runbooks.md" 2>/dev/null ||
        grep -qiE "^## .*\{#${anchor}\}|^## ${anchor}" "$src/docs/runbooks.md" 2>/dev/null ||
        missing="$missing $a(#$anchor)"
done
if [ -z "$missing" ]; then echo "ok 3 - every alert's runbook_url names a docs/runbooks.md section"
else echo "not ok 3 - runbook sections missing:$missing"; fail=1; fi
exit $fail

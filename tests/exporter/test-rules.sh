#!/usr/bin/env bash
# test-rules — deploy/prometheus/*.yml: `promtool check rules` clean, `promtool test rules`
# passes tests/exporter/rules-test.yml (firing and silent cases per alert), every alert has a
# runbook_url whose anchor is a section of docs/runbooks.md, every runbook_url on the one default
# base that deploy/prometheus/set-runbook-base.sh replaces (its output still valid rules, only
# those lines changed). TAP; 77 without promtool.
set -u
src=${ACCEL_SOURCE_ROOT:-.}
command -v promtool >/dev/null || { echo "1..0 # SKIP promtool missing (scripts/deps.sh installs prometheus)"; exit 77; }
echo "1..4"
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
# the runbook base: one default everywhere, and set-runbook-base.sh moves every link to another
set_base="$src/deploy/prometheus/set-runbook-base.sh"
default=$(sed -n 's/^DEFAULT_BASE=//p' "$set_base")
rules="$src/deploy/prometheus/accel-rules.yml"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
n_urls=$(grep -c 'runbook_url:' "$rules")
n_default=$(grep -c "runbook_url: $default#" "$rules")
problems=""
[ -n "$default" ] && [ "$n_urls" -gt 0 ] && [ "$n_urls" = "$n_default" ] ||
    problems="$problems; $n_default of $n_urls runbook_urls on the default base '$default'"
if bash "$set_base" "https://wiki.example.com/ops/accel&gpu/runbooks/" "$rules" >"$tmp/rules.yml" 2>"$tmp/err"; then
    n_new=$(grep -c 'runbook_url: https://wiki.example.com/ops/accel&gpu/runbooks#acc' "$tmp/rules.yml")
    n_changed=$(diff "$rules" "$tmp/rules.yml" | grep -c '^>')
    [ "$n_new" = "$n_urls" ] && [ "$n_changed" = "$n_urls" ] ||
        problems="$problems; rewritten: $n_new of $n_urls links, $n_changed lines changed"
    out=$(promtool check rules "$tmp/rules.yml" 2>&1) || problems="$problems; promtool: $out"
else
    problems="$problems; set-runbook-base.sh failed: $(cat "$tmp/err")"
fi
bash "$set_base" "not-a-url" "$rules" >/dev/null 2>&1 && problems="$problems; a bad base was taken"
if [ -z "$problems" ]; then echo "ok 4 - runbook_urls share one base, set-runbook-base.sh moves them all"
else echo "not ok 4 - runbook base${problems}"; fail=1; fi
exit $fail

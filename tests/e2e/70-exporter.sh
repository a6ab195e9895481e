#!/usr/bin/env bash
# Scenario "exporter": the chart's accel-exporter on the node, fed by the real kubelet's
# pod-resources API (its pod-resources-acl container grants the exporter's non-root uid the
# socket), labels a GPU pod's series with the pod's real namespace, name and container; the
# node's port 9835 (hostPort) serves it; Debian's Prometheus, run in the node's network, scrapes
# it and loads the chart's alert rules (deploy/prometheus/accel-rules.yml) without error.
set -uo pipefail
. "$(dirname "$0")/lib.sh"
rc=0

ok "the chart installs (pGPU, the exporter on) and rolls out" \
    e2e_install -f "$E2E_CI_VALUES/pgpu-values.yaml" -f "$E2E_VALUES/cdi.yaml" || exit 1
scenario_namespace e2e-exporter || {
    echo "not ok - namespace e2e-exporter"
    exit 1
}
tmp=$(mktemp -d)
prom=
cleanup() {
    [ -n "$prom" ] && kill "$prom" 2>/dev/null && wait "$prom" 2>/dev/null
    rm -rf "$tmp"
    kubectl delete namespace "$E2E_NS" --wait=true --timeout=60s >/dev/null 2>&1
}
trap cleanup EXIT

# a pod holding 1 GiB on its GPU until it is deleted
gpu_pod train '{limits: {nvidia.com/gpu: 1}}' 'sleep 3600 | emu-hold 0 1024' >/dev/null
ok "a GPU pod runs and holds 1 GiB on its GPU" sh -c \
    "'$E2E_CLUSTER/kubectl' -n $E2E_NS wait --for=jsonpath='{.status.phase}'=Running pod/train --timeout=90s >/dev/null &&
     sleep 1 && '$E2E_CLUSTER/kubectl' -n $E2E_NS logs train | grep -q '^ready'" || {
    why_pod "$E2E_NS" train | sed 's/^/# /'
    rc=1
}

metrics() { "$E2E_CLUSTER/enter" curl -sf -m 5 "http://$CL_NODE_IP:9835/metrics"; }
series_named() {
    local out
    out=$(metrics) || {
        echo "no answer on $CL_NODE_IP:9835"
        return 1
    }
    printf '%s\n' "$out" | grep -E "^accel_exporter_pod_resources_up|^accel_container_gpu_memory_used_bytes|^accel_pod_gpu_allocated_seconds_total" |
        grep -E "pod_resources_up|pod=\"train\"" | head -n 5
    printf '%s\n' "$out" | grep -qx 'accel_exporter_pod_resources_up 1' &&
        printf '%s\n' "$out" | grep -E "^accel_container_gpu_memory_used_bytes\{.*namespace=\"$E2E_NS\",pod=\"train\",container=\"main\"" |
        awk '{ exit !($NF >= 1073741824) }' &&
        printf '%s\n' "$out" | grep -qE "^accel_pod_gpu_allocated_seconds_total\{.*namespace=\"$E2E_NS\",pod=\"train\",container=\"main\""
}
ok "the exporter on the node's port 9835 names the pod's GPU series by the real pod (pod-resources up, 1 GiB used by e2e-exporter/train/main)" \
    wait_until 30 series_named || rc=1

# Debian's Prometheus in the node's network namespace, scraping the node's port as the
# runbooks do, with the chart's rules
cp "$E2E_REPO/deploy/prometheus/accel-rules.yml" "$tmp/rules.yml"
cat >"$tmp/prometheus.yml" <<YAML
global: {scrape_interval: 1s, evaluation_interval: 1s}
rule_files: [$tmp/rules.yml]
scrape_configs:
  - job_name: accel-exporter
    static_configs: [{targets: ["$CL_NODE_IP:9835"]}]
YAML
nsenter --net="/run/netns/$CL_NETNS" -- timeout 300 prometheus --config.file="$tmp/prometheus.yml" \
    --storage.tsdb.path="$tmp/data" --web.listen-address=127.0.0.1:19090 >"$tmp/prometheus.log" 2>&1 &
prom=$!
query() { nsenter --net="/run/netns/$CL_NETNS" -- curl -sf -m 5 --data-urlencode "query=$1" http://127.0.0.1:19090/api/v1/query; }
scraped() {
    local out
    out=$(query "accel_container_gpu_memory_used_bytes{namespace=\"$E2E_NS\",pod=\"train\"}") || {
        tail -n 3 "$tmp/prometheus.log"
        return 1
    }
    echo "$out" | head -c 400
    echo
    echo "$out" | python3 -c 'import json,sys; r=json.load(sys.stdin)["data"]["result"]; sys.exit(0 if r and float(r[0]["value"][1]) >= 2**30 else 1)' &&
        query 'up{job="accel-exporter"}' | grep -q '"value":\[[0-9.]*,"1"\]'
}
ok "Prometheus (Debian's) scrapes the exporter (up 1) and has the pod's series" wait_until 45 scraped || rc=1
rules_ok() {
    local out
    out=$(nsenter --net="/run/netns/$CL_NETNS" -- curl -sf -m 5 http://127.0.0.1:19090/api/v1/rules) || return 1
    echo "$out" | python3 -c '
import json, sys
groups = json.load(sys.stdin)["data"]["groups"]
rules = [r for g in groups for r in g["rules"]]
bad = [(r["name"], r.get("lastError")) for r in rules if r.get("health") not in ("ok", "unknown")]
print(len(groups), "group(s),", len(rules), "rule(s); bad:", bad)
sys.exit(0 if rules and not bad and all(r.get("health") == "ok" for r in rules) else 1)'
}
ok "it loads the chart's alert rules and evaluates every one without error" wait_until 30 rules_ok || rc=1
exit $rc

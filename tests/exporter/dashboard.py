"""dashboard — reads deploy/grafana/accel-dashboard.json for the tests: its panels (rows
flattened), their PromQL targets, and each query with the dashboard's variables set to "all"
so it can be sent to Prometheus's HTTP API as Grafana would send it."""
import json
import os
import re

SRC = os.environ.get("ACCEL_SOURCE_ROOT",
                     os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
PATH = os.path.join(SRC, "deploy", "grafana", "accel-dashboard.json")

# Grafana's built-in interval variables, as Grafana would fill them for a short range with a
# 1 s scrape interval (the tests' Prometheus)
BUILTINS = {"__rate_interval": "1m", "__interval": "15s", "__range": "1h"}


def load(path=PATH):
    with open(path) as f:
        return json.load(f)


def panels(d):
    """Every panel, rows' nested panels included."""
    out = []
    for p in d.get("panels", []):
        out.append(p)
        out.extend(p.get("panels", []))
    return out


def variables(d):
    return {v["name"]: v for v in d.get("templating", {}).get("list", [])}


def queries(d):
    """(panel title, refId, expr) for every target of every panel."""
    return [(p.get("title"), t.get("refId"), t.get("expr"))
            for p in panels(d) for t in p.get("targets", [])]


def expand(expr, d):
    """expr with $var / ${var} replaced: query variables by their allValue (all selected),
    Grafana's built-ins by BUILTINS. Raises KeyError for an unknown variable."""
    vs = variables(d)

    def sub(m):
        name = m.group(1) or m.group(2)
        if name in BUILTINS:
            return BUILTINS[name]
        v = vs[name]
        return v.get("allValue") or ".*"
    return re.sub(r"\$\{(\w+)\}|\$(\w+)", sub, expr)

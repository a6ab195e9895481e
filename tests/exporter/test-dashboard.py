#!/usr/bin/env python3
"""test-dashboard — deploy/grafana/accel-dashboard.json is well-formed: JSON that Grafana
imports (title, uid, schemaVersion, panels with gridPos), unique panel ids, every panel and
target on the dashboard's `datasource` variable (a Prometheus data source), every variable a
query names defined, and every metric a query names one the exporter, Prometheus or the rule
file provides. The queries themselves run against a real Prometheus in test-exporter.py.
Prints TAP."""
import glob
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "lib"))
sys.path.insert(0, HERE)
import dashboard  # noqa: E402
from taptest import case, check, run  # noqa: E402

D = {}


@case("the dashboard is JSON with a title, uid, schemaVersion and panels")
def _():
    D.update(dashboard.load())
    for k in ("title", "uid", "schemaVersion", "panels", "templating"):
        check(k in D, f"no {k}")
    check(re.fullmatch(r"[A-Za-z0-9_-]{1,40}", D["uid"]), f"uid {D['uid']!r}")
    check(len(dashboard.panels(D)) >= 10, "too few panels")


@case("panel ids are unique, every panel has a gridPos inside the 24-column grid")
def _():
    ids = [p.get("id") for p in dashboard.panels(D)]
    check(all(isinstance(i, int) for i in ids), f"ids {ids}")
    dup = {i for i in ids if ids.count(i) > 1}
    check(not dup, f"duplicate panel ids {dup}")
    for p in dashboard.panels(D):
        g = p.get("gridPos", {})
        check(all(isinstance(g.get(k), int) for k in "hwxy"), f"{p.get('title')}: gridPos {g}")
        check(g["x"] + g["w"] <= 24, f"{p.get('title')}: wider than the grid")


@case("every panel and target uses the datasource variable, a Prometheus data source")
def _():
    vs = dashboard.variables(D)
    ds = vs.get("datasource")
    check(ds and ds["type"] == "datasource" and ds["query"] == "prometheus",
          f"datasource variable {ds}")
    known = {"${datasource}", "$datasource"}
    for p in dashboard.panels(D):
        if p["type"] == "row":
            continue
        check(p.get("targets"), f"{p['title']}: no targets")
        for o in [p] + p["targets"]:
            d = o.get("datasource", {})
            check(d.get("type") == "prometheus" and d.get("uid") in known,
                  f"{p['title']}: datasource {d}")
    for v in vs.values():
        if v["type"] == "query":
            check(v["datasource"].get("uid") in known, f"variable {v['name']}: datasource")


@case("every variable a query names is defined; every refId unique within its panel")
def _():
    for title, ref, expr in dashboard.queries(D):
        check(expr and ref, f"{title}: target without expr or refId")
        try:
            dashboard.expand(expr, D)
        except KeyError as e:
            raise AssertionError(f"{title}/{ref}: unknown variable {e}") from None
    for v in dashboard.variables(D).values():
        if v["type"] == "query":
            dashboard.expand(v["query"]["query"], D)
    for p in dashboard.panels(D):
        refs = [t["refId"] for t in p.get("targets", [])]
        check(len(refs) == len(set(refs)), f"{p['title']}: refIds {refs}")


@case("every metric a query names is exported, recorded, or Prometheus's own")
def _():
    src = dashboard.SRC
    exported = set()
    for c in glob.glob(os.path.join(src, "src", "exporter", "*.c")):  # families in any module
        with open(c) as f:
            exported |= set(re.findall(r'"(accel_[a-z_]+)', f.read()))
    with open(os.path.join(src, "deploy", "prometheus", "accel-rules.yml")) as f:
        recorded = set(re.findall(r"record: (\S+)", f.read()))
    builtin = {"up", "ALERTS", "ALERTS_FOR_STATE"}
    funcs = {"count", "sum", "max", "min", "avg", "rate", "increase", "by", "on", "group_left",
             "label_values", "instance", "gpu", "uuid", "name", "driver_version",
             "vbios_version", "xid", "namespace", "alertname", "job", "pod", "resource"}
    for title, ref, expr in dashboard.queries(D):
        e = re.sub(r'"[^"]*"', '""', dashboard.expand(expr, D))
        e = re.sub(r"\[[^\]]*\]", "", e)
        for name in set(re.findall(r"[A-Za-z_:][A-Za-z0-9_:]*", e)) - funcs:
            check(name in exported or name in recorded or name in builtin,
                  f"{title}/{ref}: {name} is no metric the exporter or rules provide")


run()

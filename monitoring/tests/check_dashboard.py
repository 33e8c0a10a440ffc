#!/usr/bin/python3
"""Structure check of a Grafana dashboard JSON for wgtrain (stdlib only).

  check_dashboard.py monitoring/grafana/dashboards/wgtrain.json

Checks: valid JSON; uid/title; schemaVersion >= 36; template variables
DS_PROMETHEUS (datasource), run_id and node (query, regex-friendly allValue
".*"); unique panel ids and a gridPos on every panel; every non-row panel has
a Prometheus datasource (the ${DS_PROMETHEUS} variable or uid "prometheus")
and at least one target with a non-empty expr; label matchers on $run_id and
$node use =~ (so that "All" = ".*" works). Exit 1 with one line per problem.
"""
import json
import re
import sys

DS_UIDS = {"${DS_PROMETHEUS}", "$DS_PROMETHEUS", "prometheus"}


def panels_of(panels):
    for p in panels or []:
        yield p
        yield from panels_of(p.get("panels"))


def check(path):
    errs = []
    try:
        with open(path, encoding="utf-8") as f:
            d = json.load(f)
    except (OSError, ValueError) as e:
        return ["cannot read JSON: %s" % e]
    for key in ("uid", "title"):
        if not d.get(key):
            errs.append("missing %s" % key)
    if not isinstance(d.get("schemaVersion"), int) or d["schemaVersion"] < 36:
        errs.append("schemaVersion must be >= 36, is %r" % d.get("schemaVersion"))
    variables = {v.get("name"): v for v in (d.get("templating") or {}).get("list") or []}
    if variables.get("DS_PROMETHEUS", {}).get("type") != "datasource":
        errs.append("template variable DS_PROMETHEUS (type datasource) missing")
    for name in ("run_id", "node"):
        v = variables.get(name)
        if not v or v.get("type") != "query":
            errs.append("template variable %s (type query) missing" % name)
        elif v.get("includeAll") and v.get("allValue") != ".*":
            errs.append("variable %s: allValue must be '.*' for =~ matchers" % name)
    ids, n_targets = set(), 0
    for p in panels_of(d.get("panels")):
        title = "panel %s %r" % (p.get("id"), p.get("title"))
        if p.get("id") in ids:
            errs.append("%s: duplicate id" % title)
        ids.add(p.get("id"))
        if not all(k in (p.get("gridPos") or {}) for k in ("h", "w", "x", "y")):
            errs.append("%s: gridPos incomplete" % title)
        if p.get("type") == "row":
            continue
        ds = p.get("datasource") or {}
        if not isinstance(ds, dict) or ds.get("type") != "prometheus" or ds.get("uid") not in DS_UIDS:
            errs.append("%s: datasource must be prometheus with uid in %s, is %r" % (title, sorted(DS_UIDS), ds))
        targets = [t for t in p.get("targets") or [] if (t.get("expr") or "").strip()]
        if not targets:
            errs.append("%s: no target with an expr" % title)
        for t in targets:
            n_targets += 1
            tds = t.get("datasource")
            if tds is not None and (not isinstance(tds, dict) or tds.get("uid") not in DS_UIDS):
                errs.append("%s %s: target datasource %r" % (title, t.get("refId"), tds))
            for m in re.finditer(r'(\w+)\s*(=~|!~|!=|=)\s*"[^"]*\$\{?(run_id|node)\b', t["expr"]):
                if m.group(2) != "=~":
                    errs.append("%s %s: use %s=~ with $%s" % (title, t.get("refId"), m.group(1), m.group(3)))
    if not errs:
        print("%s: OK (%d panels, %d expressions)" % (path, len(ids), n_targets))
    return errs


def main(argv):
    if len(argv) < 2:
        print(__doc__)
        return 2
    bad = 0
    for path in argv[1:]:
        for e in check(path):
            print("%s: %s" % (path, e))
            bad += 1
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

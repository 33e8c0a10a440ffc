#!/usr/bin/python3
"""Extract and check every PromQL expression of the wgtrain monitoring files.

Sources:
  --dashboard FILE   Grafana dashboard JSON: panels[].targets[].expr (rows and
                     nested panels included) and query template variables.
  --rules FILE       Prometheus rule file (alerts.yml): groups[].rules[].expr.
Without either, the files next to this script are used
(grafana/dashboards/*.json and alerts.yml).

Modes:
  --list                   print "SOURCE<TAB>EXPR" per expression (one line
                           each, whitespace collapsed), after substitution.
  --promtool PATH          offline syntax check: write every expression into a
                           temporary recording-rule file and run
                           `PATH check rules` on it (exit 1 on failure).
  --prometheus URL         evaluate each expression with /api/v1/query and
                           print one line per expression:
                             OK|EMPTY|ERROR  <n> series  SOURCE  EXPR
                           Exit 1 on any ERROR, and on EMPTY for an expression
                           that must return data: every dashboard panel and
                           variable expression (unless --allow-empty-dashboard)
                           and every
                           expression matched by --require-data REGEX
                           (regex searched in "SOURCE EXPR"; repeatable).
                           --wait SECONDS re-queries missing data until then.

Grafana variables in dashboard expressions are substituted before use:
$__rate_interval/$__interval/$__range (and _s/_ms forms) by fixed durations,
every other $var / ${var} / ${var:fmt} / [[var]] by ".*" (the dashboard uses
=~ matchers) or by --var NAME=VALUE. Template variable queries
label_values(SELECTOR, LABEL) become `count by (LABEL) (SELECTOR)`;
query_result(EXPR) becomes EXPR; label_values(LABEL), label_names() and
metrics() have no PromQL form and are skipped (reported as SKIP).

Stdlib only, plus PyYAML when available (python3-yaml); without it a minimal
reader for the `expr:` keys of rule files is used.
"""

import argparse
import glob
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))

# Fixed values of Grafana's built-in interval variables.
BUILTIN = {
    "__rate_interval": "1m",
    "__interval": "15s",
    "__interval_ms": "15000",
    "__range": "1h",
    "__range_s": "3600",
    "__range_ms": "3600000",
}


class Expr:
    """One expression: where it comes from, the text to use, and its kind."""

    def __init__(self, source, expr, kind, skip=None):
        self.source = source  # human-readable origin, e.g. dashboard:wgtrain.json panel 3 "Loss" A
        self.expr = expr      # PromQL after substitution (None when skipped)
        self.kind = kind      # "dashboard" | "variable" | "rule"
        self.skip = skip      # reason when there is no PromQL to check

    def one_line(self):
        return " ".join((self.expr or "").split())


# ---- Grafana ----------------------------------------------------------------

VAR_RE = re.compile(r"\$\{(\w+)(?::[^}]*)?\}|\[\[(\w+)(?::[^\]]*)?\]\]|\$(\w+)")


def substitute(expr, overrides):
    def repl(m):
        name = m.group(1) or m.group(2) or m.group(3)
        if name in overrides:
            return overrides[name]
        if name in BUILTIN:
            return BUILTIN[name]
        return ".*"
    return VAR_RE.sub(repl, expr)


def translate_variable_query(query):
    """Grafana Prometheus variable query -> (PromQL or None, skip reason)."""
    q = query.strip()
    m = re.fullmatch(r"label_values\((.*),\s*([A-Za-z_]\w*)\s*\)", q, re.S)
    if m:
        return "count by (%s) (%s)" % (m.group(2), m.group(1).strip()), None
    if re.fullmatch(r"label_values\(\s*[A-Za-z_]\w*\s*\)", q):
        return None, "label_values(LABEL) has no PromQL form"
    m = re.fullmatch(r"query_result\((.*)\)", q, re.S)
    if m:
        return m.group(1).strip(), None
    if re.fullmatch(r"(label_names|metrics)\(.*\)", q, re.S):
        return None, q.split("(")[0] + "() has no PromQL form"
    return q, None


def walk_panels(panels):
    for p in panels or []:
        yield p
        # collapsed rows keep their panels inside
        yield from walk_panels(p.get("panels"))


def dashboard_exprs(path, overrides):
    name = os.path.basename(path)
    with open(path, encoding="utf-8") as f:
        dash = json.load(f)
    out = []
    for p in walk_panels(dash.get("panels")):
        for t in p.get("targets") or []:
            expr = t.get("expr")
            if not expr:
                continue
            src = 'dashboard:%s panel %s "%s" %s' % (name, p.get("id"), p.get("title", ""), t.get("refId", "?"))
            out.append(Expr(src, substitute(expr, overrides), "dashboard"))
    for v in (dash.get("templating") or {}).get("list") or []:
        if v.get("type") != "query":
            continue
        q = v.get("query")
        if isinstance(q, dict):
            q = q.get("query") or q.get("expr") or ""
        q = q or v.get("definition") or ""
        if not q:
            continue
        src = "dashboard:%s variable $%s" % (name, v.get("name"))
        promql, skip = translate_variable_query(q)
        out.append(Expr(src, substitute(promql, overrides) if promql else None, "variable", skip))
    return out


# ---- rule files -----------------------------------------------------------------

def load_rules_yaml(path):
    """[(name, expr)] of a rule file, via PyYAML or a minimal fallback reader."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    try:
        import yaml  # python3-yaml
    except ImportError:
        return load_rules_minimal(text)
    doc = yaml.safe_load(text) or {}
    out = []
    for g in doc.get("groups") or []:
        for r in g.get("rules") or []:
            name = r.get("alert") or r.get("record") or "?"
            out.append(("%s/%s" % (g.get("name"), name), str(r.get("expr", ""))))
    return out


def load_rules_minimal(text):
    """Just enough YAML for rule files: `- alert:|record: NAME` then `expr:`
    as a plain/quoted scalar or a `|`/`>` block scalar."""
    out, name, lines, i = [], "?", text.splitlines(), 0
    while i < len(lines):
        line = lines[i]
        m = re.match(r"\s*-?\s*(alert|record):\s*(\S+)", line)
        if m:
            name = m.group(2).strip("'\"")
        m = re.match(r"(\s*)(?:-\s*)?expr:\s*(.*)$", line)
        if m:
            value = m.group(2).strip()
            if value[:1] in ("|", ">"):
                indent, body = None, []
                i += 1
                while i < len(lines):
                    nxt = lines[i]
                    if nxt.strip() == "":
                        body.append("")
                        i += 1
                        continue
                    ind = len(nxt) - len(nxt.lstrip())
                    if indent is None:
                        indent = ind
                    if ind < indent or ind <= len(m.group(1)):
                        break
                    body.append(nxt[indent:])
                    i += 1
                out.append((name, "\n".join(body).strip()))
                continue
            if value[:1] in ("'", '"') and value[-1:] == value[:1]:
                value = value[1:-1]
            out.append((name, value))
        i += 1
    return out


def rule_exprs(path):
    name = os.path.basename(path)
    return [Expr("rules:%s %s" % (name, rn), e, "rule") for rn, e in load_rules_yaml(path)]


# ---- checks -------------------------------------------------------------------

def promtool_check(exprs, promtool):
    """Validate syntax offline: one recording rule per expression."""
    import json as _json  # JSON strings are valid YAML double-quoted scalars
    lines = ["groups:", "  - name: check_promql", "    rules:"]
    index = []
    for i, e in enumerate(x for x in exprs if x.expr):
        lines.append("      - record: check_promql:expr_%03d" % i)
        lines.append("        expr: %s" % _json.dumps(e.expr))
        index.append(e)
    with tempfile.NamedTemporaryFile("w", suffix=".yml", delete=False) as f:
        f.write("\n".join(lines) + "\n")
        tmp = f.name
    try:
        r = subprocess.run([promtool, "check", "rules", tmp], capture_output=True, text=True)
    finally:
        os.unlink(tmp)
    if r.returncode != 0:
        sys.stdout.write(r.stdout + r.stderr)
        for i, e in enumerate(index):
            print("  check_promql:expr_%03d = %s: %s" % (i, e.source, e.one_line()))
        print("promtool: PromQL syntax check FAILED")
        return False
    print("promtool: %d expressions are valid PromQL" % len(index))
    return True


def query(base, expr, timeout=10.0):
    """(status, n_series, error) of an instant query."""
    data = urllib.parse.urlencode({"query": expr}).encode()
    req = urllib.request.Request(base.rstrip("/") + "/api/v1/query", data=data,
                                 headers={"Content-Type": "application/x-www-form-urlencoded"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            body = json.loads(r.read().decode())
    except urllib.error.HTTPError as e:
        try:
            body = json.loads(e.read().decode())
        except Exception:  # noqa: BLE001 - report the HTTP error itself
            return "ERROR", 0, "HTTP %d" % e.code
    except (urllib.error.URLError, OSError, ValueError) as e:
        return "ERROR", 0, str(e)
    if body.get("status") != "success":
        return "ERROR", 0, "%s: %s" % (body.get("errorType"), body.get("error"))
    result = body["data"]["result"]
    n = len(result) if isinstance(result, list) else 1  # scalar/string results count as data
    return ("OK" if n else "EMPTY"), n, None


def evaluate(exprs, base, must_have_data, wait_s):
    deadline = time.monotonic() + wait_s
    results = {}
    todo = [e for e in exprs if e.expr]
    while True:
        # re-query everything each round so that the report is one snapshot
        for e in todo:
            results[id(e)] = query(base, e.expr)
        missing = [e for e in todo if results[id(e)][0] == "EMPTY" and must_have_data(e)]
        if not missing or time.monotonic() >= deadline:
            break
        time.sleep(min(2.0, max(0.0, deadline - time.monotonic())))
    failed = 0
    for e in exprs:
        if not e.expr:
            print("SKIP   %4s         %s  (%s)" % ("-", e.source, e.skip))
            continue
        status, n, err = results[id(e)]
        bad = status == "ERROR" or (status == "EMPTY" and must_have_data(e))
        failed += bad
        mark = status + ("!" if bad and status == "EMPTY" else "")
        line = "%-6s %4d series  %s  %s" % (mark, n, e.source, e.one_line())
        if err:
            line += "  -> " + err
        print(line)
    total = sum(1 for e in exprs if e.expr)
    print("%d expressions, %d failed (ERROR, or EMPTY! where data is required)" % (total, failed))
    return failed == 0


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n", 1)[1])
    ap.add_argument("--dashboard", action="append", default=[], help="Grafana dashboard JSON (repeatable)")
    ap.add_argument("--rules", action="append", default=[], help="Prometheus rule file (repeatable)")
    ap.add_argument("--list", action="store_true", help="print the expressions")
    ap.add_argument("--promtool", help="promtool binary: check the PromQL syntax offline")
    ap.add_argument("--prometheus", help="base URL, e.g. http://127.0.0.1:9090: evaluate the expressions")
    ap.add_argument("--require-data", action="append", default=[], metavar="REGEX",
                    help="expressions whose 'SOURCE EXPR' matches must return samples (repeatable)")
    ap.add_argument("--allow-empty-dashboard", action="store_true",
                    help="dashboard panel expressions may return no data")
    ap.add_argument("--wait", type=float, default=0.0, metavar="SECONDS",
                    help="re-query expressions that must return data but do not, up to this long")
    ap.add_argument("--var", action="append", default=[], metavar="NAME=VALUE",
                    help="value of a dashboard variable (default '.*')")
    args = ap.parse_args(argv)

    if not (args.list or args.promtool or args.prometheus):
        ap.error("give --list, --promtool PATH and/or --prometheus URL")
    overrides = {}
    for kv in args.var:
        if "=" not in kv:
            ap.error("--var needs NAME=VALUE: %r" % kv)
        k, v = kv.split("=", 1)
        overrides[k.lstrip("$")] = v
    dashboards, rules = args.dashboard, args.rules
    if not dashboards and not rules:
        dashboards = sorted(glob.glob(os.path.join(HERE, "grafana", "dashboards", "*.json")))
        rules = [os.path.join(HERE, "alerts.yml")]

    exprs = []
    try:
        for d in dashboards:
            exprs += dashboard_exprs(d, overrides)
        for r in rules:
            exprs += rule_exprs(r)
    except (OSError, ValueError) as e:
        print("error: %s" % e, file=sys.stderr)
        return 1
    if not exprs:
        print("error: no expressions found", file=sys.stderr)
        return 1

    ok = True
    if args.list:
        for e in exprs:
            print("%s\t%s" % (e.source, e.one_line() if e.expr else "SKIP (%s)" % e.skip))
        empty = [e for e in exprs if e.expr is not None and not e.expr.strip()]
        for e in empty:
            print("error: empty expression in %s" % e.source, file=sys.stderr)
        ok = ok and not empty
    if args.promtool:
        ok = promtool_check(exprs, args.promtool) and ok
    if args.prometheus:
        patterns = [re.compile(p) for p in args.require_data]

        def must_have_data(e):
            if e.kind in ("dashboard", "variable") and not args.allow_empty_dashboard:
                return True
            text = "%s %s" % (e.source, e.one_line())
            return any(p.search(text) for p in patterns)

        ok = evaluate(exprs, args.prometheus, must_have_data, args.wait) and ok
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

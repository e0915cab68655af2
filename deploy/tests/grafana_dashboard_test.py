#!/usr/bin/python3
"""The Grafana dashboards parse, take their datasource from the ${datasource}
variable, and every query is valid PromQL (promtool parses each one as a
recording rule, with Grafana's variables filled in).

Usage: grafana_dashboard_test.py DASHBOARD.json...
"""
import json
import os
import subprocess
import sys
import tempfile

import yaml

PROMTOOL = "/usr/bin/promtool"
VARIABLES = {"$__rate_interval": "1m", "$__interval": "15s", "$__range": "1h",
             "$job": "gemm", "$instance": ".*"}


def fail(message):
    print("FAIL: " + message, file=sys.stderr)
    sys.exit(1)


def main():
    if not os.access(PROMTOOL, os.X_OK):
        fail(f"{PROMTOOL} is not installed. Run tools/install-deps.sh (Debian's "
             "`prometheus` package brings promtool).")
    rules = []
    for path in sys.argv[1:]:
        if subprocess.call([sys.executable, "-m", "json.tool", path],
                           stdout=subprocess.DEVNULL) != 0:
            fail(f"{path} is not valid JSON")
        dashboard = json.load(open(path))
        names = [v["name"] for v in dashboard["templating"]["list"]]
        if "datasource" not in names:
            fail(f"{path}: no `datasource` template variable")
        for panel in dashboard["panels"]:
            if panel["type"] == "row":
                continue
            if panel.get("datasource", {}).get("uid") != "${datasource}":
                fail(f"{path}: panel {panel['title']!r} does not use ${{datasource}}")
            if not panel.get("targets"):
                fail(f"{path}: panel {panel['title']!r} has no query")
            for t in panel["targets"]:
                if t.get("datasource", {}).get("uid") != "${datasource}":
                    fail(f"{path}: a query of {panel['title']!r} does not use ${{datasource}}")
                expr = t["expr"]
                for var, value in VARIABLES.items():
                    expr = expr.replace(var, value)
                if "$" in expr:
                    fail(f"{path}: unknown variable in {t['expr']!r}")
                rules.append({"record": f"dashboard:query:{len(rules)}", "expr": expr})
        ids = [p["id"] for p in dashboard["panels"]]
        if len(ids) != len(set(ids)):
            fail(f"{path}: duplicate panel ids")
        types = {p["type"] for p in dashboard["panels"]}
        for needed in ("timeseries", "heatmap", "xychart"):
            if needed not in types:
                fail(f"{path}: no {needed} panel")

    with tempfile.NamedTemporaryFile("w", suffix=".yml", delete=False) as f:
        yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}, f)
    if subprocess.call([PROMTOOL, "check", "rules", f.name]) != 0:
        fail("a dashboard query is not valid PromQL (see above)")
    print(f"PASS: {len(rules)} queries parse")


if __name__ == "__main__":
    main()

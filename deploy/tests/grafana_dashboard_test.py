#!/usr/bin/python3
"""The Grafana dashboards parse, take their datasource from the ${datasource}
variable, every query is valid PromQL (promtool parses each one as a
recording rule, with Grafana's variables filled in), and the roofline chart
draws the roof itself (the bandwidth slope and compute ceiling per dtype)
under its measured points.

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


ROOF_DTYPES = ("bf16", "fp16", "tf32", "fp32")


def check_roofline(path, dashboard):
    """The xychart has the measured points and, per dtype, a roof series
    (its corners from the instance_dtype_point:gemm_roof_* recording rules)
    drawn as lines on the same intensity axis."""
    charts = [p for p in dashboard["panels"] if p["type"] == "xychart"
              and "oofline" in p["title"]]
    if not charts:
        fail(f"{path}: no roofline xychart")
    chart = charts[0]
    exprs = {t["refId"]: t["expr"] for t in chart["targets"]}
    if not any("gemm_flops_per_second:rate1m" in e for e in exprs.values()):
        fail(f"{path}: the roofline chart has no measured points")
    if not any("gemm_roof_intensity_flops_per_byte" in e
               and "gemm_arithmetic_intensity_flops_per_byte" in e for e in exprs.values()):
        fail(f"{path}: the roof's intensities do not share the points' x column")
    renames = {}
    for t in chart.get("transformations", []):
        if t["id"] == "organize":
            renames.update(t["options"].get("renameByName", {}))
    lines = set()
    for o in chart["fieldConfig"].get("overrides", []):
        if any(p["id"] == "custom.show" and "lines" in p["value"] for p in o["properties"]):
            lines.add(o["matcher"]["options"])
    for dtype in ROOF_DTYPES:
        refs = [r for r, e in exprs.items()
                if "gemm_roof_flops_per_second" in e and f'dtype="{dtype}"' in e]
        if not refs:
            fail(f"{path}: the roofline chart has no roof series for {dtype}")
        name = renames.get(f"Value #{refs[0]}")
        if name is None:
            fail(f"{path}: the {dtype} roof series is not named")
        if name not in lines:
            fail(f"{path}: the {dtype} roof series {name!r} is not drawn as a line")
    if chart["options"]["dims"].get("x") != renames.get("Value #A"):
        fail(f"{path}: the roofline chart's x is not the intensity column")


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
        check_roofline(path, dashboard)

    with tempfile.NamedTemporaryFile("w", suffix=".yml", delete=False) as f:
        yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}, f)
    if subprocess.call([PROMTOOL, "check", "rules", f.name]) != 0:
        fail("a dashboard query is not valid PromQL (see above)")
    print(f"PASS: {len(rules)} queries parse")


if __name__ == "__main__":
    main()

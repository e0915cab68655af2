#!/usr/bin/python3
"""End-to-end observability: the real gemm_server under load, scraped by a real
Prometheus (Debian's package) that loads deploy/prometheus/prometheus.yml and
its rules. Asserts through Prometheus' HTTP API that every recording rule and
every dashboard query returns data (save the GPU-only transfer figures), that
achieved FLOP/s > 0 and the fraction of peak is in (0, 1], and runs
`promtool check metrics` on the scraped text. All on 127.0.0.1.

Usage (Bazel passes these): observability_e2e_test.py GEMM_SERVER GEMM_CLI
    HEALTH_PROBE PROMETHEUS_YML RECORDING_RULES ALERT_RULES DASHBOARD_JSON
"""
import json
import math
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request

import yaml

PROMETHEUS = "/usr/bin/prometheus"
PROMTOOL = "/usr/bin/promtool"
JOB = "gemm"
# Present only with the GPU backend (host<->device copies).
GPU_ONLY = ("gemm_transfer_bytes",)
DEADLINE_S = 120


def fail(message):
    print("FAIL: " + message, file=sys.stderr)
    sys.exit(1)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(what, predicate, timeout_s):
    end = time.time() + timeout_s
    while time.time() < end:
        value = predicate()
        if value:
            return value
        time.sleep(0.5)
    fail(f"timed out after {timeout_s}s waiting for {what}")


def http_get(url, timeout=5):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.read().decode()


def query(prom, expr):
    url = f"http://{prom}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    body = json.loads(http_get(url))
    if body.get("status") != "success":
        fail(f"query {expr!r}: {body}")
    return body["data"]["result"]


def numbers(result):
    return [float(sample["value"][1]) for sample in result]


def dashboard_queries(dashboard):
    """Every (panel title, expr) with Grafana's variables filled in as this
    test's scrape would: one job, all instances, a 1m rate interval."""
    for panel in dashboard["panels"]:
        for t in panel.get("targets", []):
            expr = (t["expr"].replace("$__rate_interval", "1m")
                    .replace("$job", JOB).replace("$instance", ".*"))
            yield panel["title"], expr


class Stack:
    """The processes this test starts; stopped in reverse order."""

    def __init__(self, tmp):
        self.tmp = tmp
        self.procs = []

    def start(self, name, argv):
        log = open(os.path.join(self.tmp, name + ".log"), "w")
        p = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
        self.procs.append((name, p))
        return p

    def log(self, name):
        with open(os.path.join(self.tmp, name + ".log")) as f:
            return f.read()

    def stop(self):
        for name, p in reversed(self.procs):
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                try:
                    p.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()


def main():
    if len(sys.argv) != 8:
        fail(__doc__)
    server, cli, probe, prom_yml, recording, alerts, dashboard_json = map(
        os.path.abspath, sys.argv[1:])
    for tool in (PROMETHEUS, PROMTOOL):
        if not os.access(tool, os.X_OK):
            fail(f"{tool} is not installed. Run tools/install-deps.sh (it installs "
                 "Debian's `prometheus` package, which brings promtool).")
    tmp = os.environ.get("TEST_TMPDIR") or __import__("tempfile").mkdtemp()
    started = time.time()
    stack = Stack(tmp)
    try:
        run(stack, tmp, server, cli, probe, prom_yml, recording, alerts, dashboard_json)
    finally:
        stack.stop()
    print(f"PASS in {time.time() - started:.1f}s")


def run(stack, tmp, server, cli, probe, prom_yml, recording, alerts, dashboard_json):
    # The gemm server. The metrics port is chosen before the server binds it;
    # another process may take it first, so retry with a new one.
    # Tenants: the load below is anonymous, so it is tenant "other"; the
    # dashboard's Tenants row compares its share with the weights.
    tenants_file = os.path.join(tmp, "tenants")
    with open(tenants_file, "w") as f:
        f.write("tenant team-a weight=3 caller=alice\n")
    for attempt in range(5):
        metrics_port = free_port()
        port_file = os.path.join(tmp, f"port{attempt}")
        gemm = stack.start("gemm_server", [
            server, "--listen=127.0.0.1:0", f"--port_file={port_file}",
            f"--metrics_listen=127.0.0.1:{metrics_port}", "--backend=cpu",
            "--cpu_concurrency=1", "--blas_threads=1", "--log_level=info",
            f"--tenants_file={tenants_file}"])

        def started_or_exited():
            if gemm.poll() is not None:
                return "exited"
            if os.path.exists(port_file) and os.path.getsize(port_file) > 0:
                return "started"
            return None
        if wait_for("gemm_server to start", started_or_exited, 60) == "started":
            break
    else:
        fail("gemm_server did not start:\n" + stack.log("gemm_server"))
    target = f"127.0.0.1:{open(port_file).read().strip()}"
    metrics = f"127.0.0.1:{metrics_port}"
    if subprocess.call([probe, f"--addr={target}", "--deadline=10s"]) != 0:
        fail("health_probe did not report SERVING")

    # Prometheus with the project's config: same rules, faster intervals,
    # the target on loopback.
    config = yaml.safe_load(open(prom_yml))
    config["global"]["scrape_interval"] = "1s"
    config["global"]["evaluation_interval"] = "1s"
    config["rule_files"] = [recording, alerts]
    config["scrape_configs"] = [
        {"job_name": JOB, "static_configs": [{"targets": [metrics]}]}]
    config_path = os.path.join(tmp, "prometheus.yml")
    with open(config_path, "w") as f:
        yaml.safe_dump(config, f)
    if subprocess.call([PROMTOOL, "check", "config", config_path]) != 0:
        fail("promtool check config failed on the generated config")
    prom = f"127.0.0.1:{free_port()}"
    prometheus = stack.start("prometheus", [
        PROMETHEUS, f"--config.file={config_path}",
        f"--storage.tsdb.path={os.path.join(tmp, 'tsdb')}",
        f"--web.listen-address={prom}", "--log.level=warn"])

    def prometheus_ready():
        if prometheus.poll() is not None:
            fail("prometheus exited:\n" + stack.log("prometheus"))
        try:
            return http_get(f"http://{prom}/-/ready", timeout=1).strip() != ""
        except OSError:
            return False
    wait_for("Prometheus to be ready", prometheus_ready, 60)
    wait_for("the gemm target to be up",
             lambda: numbers(query(prom, f'up{{job="{JOB}"}}')) == [1.0], 30)

    # Load: small fp32 and bf16 GEMMs, two in flight, a few seconds each, so
    # that Prometheus scrapes the counters while they grow. Small shapes keep
    # the achieved rate well under the peak the server calibrated at start-up.
    for dtype in ("fp32", "bf16"):
        rc = subprocess.call([cli, "bench", f"--target={target}", "--m=96", "--n=96",
                              "--k=96", f"--dtype={dtype}", "--concurrency=2",
                              "--duration_s=3", "--verify_every=50"],
                             stdout=subprocess.DEVNULL)
        if rc != 0:
            fail(f"gemm_cli bench {dtype} exited {rc}")
    if subprocess.call([cli, "info", f"--target={target}"], stdout=subprocess.DEVNULL) != 0:
        fail("gemm_cli info failed")

    # Every recording rule returns data.
    rules = [r["record"] for g in yaml.safe_load(open(recording))["groups"]
             for r in g["rules"] if "record" in r]
    expected = [r for r in rules if not any(g in r for g in GPU_ONLY)]
    missing = []

    def all_rules_have_data():
        missing[:] = [r for r in expected if not query(prom, r)]
        return not missing
    end = time.time() + 45
    while not all_rules_have_data() and time.time() < end:
        time.sleep(1)
    if missing:
        fail("recording rules without data: " + ", ".join(missing))
    print(f"{len(expected)} recording rules return data "
          f"({len(rules) - len(expected)} GPU-only skipped on the CPU backend)")

    # The roofline figures are sane.
    flops = numbers(query(prom, "instance_dtype:gemm_flops_per_second:rate1m"))
    if not flops or min(flops) <= 0:
        fail(f"achieved FLOP/s must be > 0, got {flops}")
    fraction = query(prom, "instance_dtype:gemm_peak_flops:ratio_rate1m")
    for sample in fraction:
        v = float(sample["value"][1])
        if not (0 < v <= 1):
            fail(f"fraction of peak must be in (0, 1], got {v} for {sample['metric']}")
    dtypes = sorted(s["metric"]["dtype"] for s in fraction)
    if dtypes != ["bf16", "fp32"]:
        fail(f"expected fraction of peak for bf16 and fp32, got {dtypes}")
    for name in ("instance_dtype:gemm_roofline_efficiency:ratio_rate1m",
                 "job_method:gemm_request_errors:ratio_rate5m"):
        for v in numbers(query(prom, name)):
            if math.isnan(v) or not (0 <= v <= 1):
                fail(f"{name} must be in [0, 1], got {v}")
    print("achieved FLOP/s by dtype:",
          {s["metric"]["dtype"]: float(s["value"][1]) for s in
           query(prom, "instance_dtype:gemm_flops_per_second:rate1m")})
    print("fraction of peak by dtype:",
          {s["metric"]["dtype"]: float(s["value"][1]) for s in fraction})

    # Every dashboard query returns data.
    dashboard = json.load(open(dashboard_json))
    empty = []
    checked = 0
    # The roof is drawn per dtype the server reports a peak for; a query
    # pinned to another dtype (tf32 has no CPU peak) has nothing to draw.
    peak_dtypes = {s["metric"]["dtype"] for s in query(prom, "gemm_peak_flops_per_second")}
    skipped_dtypes = set()
    for title, expr in dashboard_queries(dashboard):
        if any(g in expr for g in GPU_ONLY):
            continue
        pinned = re.findall(r'dtype="([a-z0-9]+)"', expr)
        if pinned and not set(pinned) <= peak_dtypes:
            skipped_dtypes.update(set(pinned) - peak_dtypes)
            continue
        checked += 1
        if not query(prom, expr):
            empty.append(f"{title}: {expr}")
    if empty:
        fail("dashboard queries without data:\n  " + "\n  ".join(empty))
    print(f"{checked} dashboard queries return data (skipped dtypes without a peak: "
          f"{sorted(skipped_dtypes) or 'none'})")

    # The exposition itself passes promtool's linter.
    text = http_get(f"http://{metrics}/metrics")
    lint = subprocess.run([PROMTOOL, "check", "metrics"], input=text, text=True,
                          capture_output=True)
    if lint.returncode != 0:
        fail("promtool check metrics:\n" + lint.stdout + lint.stderr)
    print("promtool check metrics: clean")


if __name__ == "__main__":
    main()

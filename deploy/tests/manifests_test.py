#!/usr/bin/python3
"""Static checks of deploy/'s container and Kubernetes files (no Docker engine
or cluster runs here): yamllint passes on every YAML file; docker-compose.yml
reserves a GPU and mounts the rules and provisioning that exist; the k8s
manifests parse and request a GPU, probe grpc.health.v1 natively, run as
non-root and terminate after the drain; `kubectl kustomize` renders them when
kubectl is installed (it is not a Debian 12 package; the render is skipped
with a note otherwise); the Dockerfile keeps a non-root user and the health
probe HEALTHCHECK.

Usage: manifests_test.py YAMLLINT_CONFIG FILE...   (every file under deploy/)
"""
import os
import re
import shutil
import subprocess
import sys

import yaml


def fail(message):
    print("FAIL: " + message, file=sys.stderr)
    sys.exit(1)


def load_all(path):
    with open(path) as f:
        return [d for d in yaml.safe_load_all(f) if d is not None]


def check_compose(path):
    compose = load_all(path)[0]
    base = os.path.dirname(path)
    server = compose["services"]["gemm-server"]
    devices = server["deploy"]["resources"]["reservations"]["devices"]
    if not any(d.get("driver") == "nvidia" and "gpu" in d.get("capabilities", [])
               for d in devices):
        fail("docker-compose.yml: gemm-server reserves no nvidia GPU")
    for name in ("prometheus", "grafana"):
        for volume in compose["services"][name]["volumes"]:
            source = volume.split(":")[0]
            if source.startswith("."):
                if not os.path.exists(os.path.join(base, source)):
                    fail(f"docker-compose.yml: {name} mounts missing {source}")


def check_k8s(k8s_dir):
    docs = {}
    for name in os.listdir(k8s_dir):
        if name.endswith(".yaml") and name != "kustomization.yaml":
            for d in load_all(os.path.join(k8s_dir, name)):
                docs.setdefault(d["kind"], []).append(d)
    for kind in ("Deployment", "Service", "ServiceMonitor", "PodDisruptionBudget",
                 "HorizontalPodAutoscaler"):
        if kind not in docs:
            fail(f"k8s: no {kind}")
    pod = docs["Deployment"][0]["spec"]["template"]["spec"]
    c = pod["containers"][0]
    if str(c["resources"]["limits"].get("nvidia.com/gpu")) != "1":
        fail("k8s: the container does not limit nvidia.com/gpu to 1")
    for probe in ("readinessProbe", "livenessProbe", "startupProbe"):
        if c[probe].get("grpc", {}).get("port") != 50051:
            fail(f"k8s: {probe} is not a native grpc probe on 50051")
    if not pod["securityContext"].get("runAsNonRoot"):
        fail("k8s: the pod may run as root")
    flags = open(os.path.join(k8s_dir, "server.flags")).read()
    drain = int(re.search(r"--drain_timeout=(\d+)s", flags).group(1))
    if pod["terminationGracePeriodSeconds"] <= drain:
        fail("k8s: terminationGracePeriodSeconds must exceed --drain_timeout")
    ports = {p["name"] for s in docs["Service"] for p in s["spec"]["ports"]}
    if not {"grpc", "metrics"} <= ports:
        fail("k8s: the Services do not expose both grpc and metrics")
    if not any(s["spec"].get("clusterIP") == "None" for s in docs["Service"]):
        fail("k8s: no headless Service for client-side balancing")


def check_dockerfile(path):
    text = open(path).read()
    stages = re.findall(r"^FROM\s+(\S+)", text, re.M)
    if len(stages) < 2 or "runtime-ubuntu24.04" not in stages[-1]:
        fail(f"Dockerfile: the last stage must be the CUDA runtime image, got {stages}")
    user = re.findall(r"^USER\s+(\S+)", text, re.M)
    if not user or user[-1].split(":")[0] in ("root", "0"):
        fail("Dockerfile: the final image must run as a non-root USER")
    if not re.search(r"^HEALTHCHECK .*\n?.*health_probe", text, re.M):
        fail("Dockerfile: no HEALTHCHECK through health_probe")


def main():
    config, files = sys.argv[1], sys.argv[2:]
    yamllint = shutil.which("yamllint")
    if not yamllint:
        fail("yamllint is not installed. Run tools/install-deps.sh (Debian's "
             "`yamllint` package).")
    yamls = [f for f in files if f.endswith((".yml", ".yaml"))]
    if subprocess.call([yamllint, "--strict", "-c", config] + yamls) != 0:
        fail("yamllint (see above)")
    for f in yamls:
        load_all(f)
    by_name = {os.path.relpath(f, "deploy"): f for f in files}
    check_compose(by_name["docker-compose.yml"])
    k8s_dir = os.path.dirname(by_name["k8s/kustomization.yaml"])
    check_k8s(k8s_dir)
    check_dockerfile(by_name["Dockerfile"])

    kubectl = shutil.which("kubectl")
    if kubectl:
        # kustomize does not follow the runfiles' symlinked files: render a copy.
        copy = os.path.join(os.environ.get("TEST_TMPDIR", "/tmp"), "k8s")
        shutil.rmtree(copy, ignore_errors=True)
        shutil.copytree(k8s_dir, copy)
        for d in (copy, os.path.join(copy, "prometheus-adapter")):
            out = subprocess.run([kubectl, "kustomize", d], capture_output=True, text=True)
            if out.returncode != 0:
                fail(f"kubectl kustomize {d}:\n{out.stderr}")
            load_all_text = list(yaml.safe_load_all(out.stdout))
            print(f"kubectl kustomize {os.path.relpath(d, copy)}: {len(load_all_text)} objects")
    else:
        print("NOTE: kubectl not installed; `kubectl kustomize deploy/k8s` not rendered")
    print(f"PASS: {len(yamls)} YAML files lint clean; compose, k8s and Dockerfile checks pass")


if __name__ == "__main__":
    main()

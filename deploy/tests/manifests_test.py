#!/usr/bin/python3
"""Static checks of deploy/'s container and Kubernetes files (no Docker engine
or cluster runs here): yamllint passes on every YAML file; docker-compose.yml
reserves a GPU, mounts the rules and provisioning that exist and health-checks
the health-only port, and its TLS overlay mounts the secrets the flags name;
the k8s manifests parse and request a GPU, probe grpc.health.v1 natively on
the health-only port that server.flags opens, mount the TLS and token Secrets
read-only where server.flags reads them, run as non-root and terminate after
the drain; the NetworkPolicy admits the gRPC and metrics ports only and no
egress; the example Secrets hold no key material; `kubectl kustomize`
renders the manifests, the NetworkPolicy among them, when kubectl is
installed (it is not a Debian 12 package; the render is skipped with a note
otherwise); the Dockerfile keeps a non-root user and the health probe
HEALTHCHECK on the health port that its CMD opens.

Usage: manifests_test.py YAMLLINT_CONFIG FILE...   (every file under deploy/)
"""
import json
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


# The tables the deploy files pass: the image's copies of
# kernels/tuning/tables/nvidia_h200.table and nvidia_h100.table (each GPU
# uses its model's).
COMMITTED_TABLE = "/opt/gemm/tables/nvidia_h200.table,/opt/gemm/tables/nvidia_h100.table"


def flag_value(args, name):
    """The value of --name=VALUE in a list of arguments, or None."""
    for a in args:
        if a.startswith(f"--{name}="):
            return a.split("=", 1)[1]
    return None


def port_of(address):
    return int(address.rsplit(":", 1)[1])


def check_table_flag(where, table):
    """--tuning_table names the committed H200 table as the image carries it."""
    if table != COMMITTED_TABLE:
        fail(f"{where}: --tuning_table is {table!r}, want the committed table {COMMITTED_TABLE}")


def check_compose(path):
    compose = load_all(path)[0]
    base = os.path.dirname(path)
    server = compose["services"]["gemm-server"]
    health = flag_value(server["command"], "health_listen")
    if health is None:
        fail("docker-compose.yml: gemm-server has no --health_listen")
    check_table_flag("docker-compose.yml", flag_value(server["command"], "tuning_table"))
    test = " ".join(server["healthcheck"]["test"])
    if f"health_probe --addr=127.0.0.1:{port_of(health)}" not in test:
        fail(f"docker-compose.yml: the healthcheck does not probe the health port: {test}")
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


def check_compose_tls(path):
    overlay = load_all(path)[0]
    server = overlay["services"]["gemm-server"]
    secrets = overlay["secrets"]
    mounted = {f"/run/secrets/{name}" for name in server["secrets"]}
    for flag in ("tls_cert", "tls_key", "auth_tokens_file"):
        value = flag_value(server["command"], flag)
        if value not in mounted:
            fail(f"docker-compose.tls.yml: --{flag}={value} is not a mounted secret")
    for name in server["secrets"]:
        if not secrets[name]["file"].startswith("./secrets/"):
            fail(f"docker-compose.tls.yml: secret {name} is not read from deploy/secrets/")
    if flag_value(server["command"], "health_listen") is None:
        fail("docker-compose.tls.yml: the command drops --health_listen")
    check_table_flag("docker-compose.tls.yml", flag_value(server["command"], "tuning_table"))


def check_network_policy(policy):
    spec = policy["spec"]
    if spec["podSelector"]["matchLabels"].get("app.kubernetes.io/name") != "gemm-server":
        fail("k8s: the NetworkPolicy does not select the gemm-server pods")
    if sorted(spec["policyTypes"]) != ["Egress", "Ingress"]:
        fail("k8s: the NetworkPolicy must isolate both directions")
    if spec.get("egress"):
        fail("k8s: the NetworkPolicy allows egress; the server opens no connections")
    ports = set()
    for rule in spec["ingress"]:
        if not rule.get("from"):
            fail("k8s: a NetworkPolicy ingress rule admits every source")
        ports |= {p["port"] for p in rule["ports"]}
    if ports != {"grpc", "metrics"}:
        fail(f"k8s: the NetworkPolicy admits ports {sorted(ports)}, want grpc and metrics only "
             "(the health port is reached from the node, which is always allowed)")


def check_example_secrets(directory):
    names = set()
    for name in os.listdir(directory):
        if name.endswith(".yaml") and name != "kustomization.yaml":
            for d in load_all(os.path.join(directory, name)):
                if d["kind"] != "Secret":
                    fail(f"example-secrets/{name}: a {d['kind']}, not a Secret")
                if "data" in d:
                    fail(f"example-secrets/{name}: base64 data; placeholders go in stringData")
                for key, text in d["stringData"].items():
                    if "PRIVATE KEY-----" in text or "BEGIN CERTIFICATE" in text:
                        fail(f"example-secrets/{name}: {key} holds key material")
                    if "REPLACE" not in text:
                        fail(f"example-secrets/{name}: {key} is not a placeholder")
                names.add(d["metadata"]["name"])
    return names


def check_k8s(k8s_dir):
    docs = {}
    for name in os.listdir(k8s_dir):
        if name.endswith(".yaml") and name != "kustomization.yaml":
            for d in load_all(os.path.join(k8s_dir, name)):
                docs.setdefault(d["kind"], []).append(d)
    for kind in ("Deployment", "Service", "ServiceMonitor", "PodDisruptionBudget",
                 "HorizontalPodAutoscaler", "NetworkPolicy"):
        if kind not in docs:
            fail(f"k8s: no {kind}")
    kustomization = load_all(os.path.join(k8s_dir, "kustomization.yaml"))[0]
    listed = set(kustomization["resources"])
    for name in os.listdir(k8s_dir):
        if name.endswith(".yaml") and name not in listed | {"kustomization.yaml"}:
            fail(f"k8s: kustomization.yaml does not list {name}")
    pod = docs["Deployment"][0]["spec"]["template"]["spec"]
    c = pod["containers"][0]
    if str(c["resources"]["limits"].get("nvidia.com/gpu")) != "1":
        fail("k8s: the container does not limit nvidia.com/gpu to 1")
    flags = open(os.path.join(k8s_dir, "server.flags")).read()
    flag_list = flags.split()
    health = flag_value(flag_list, "health_listen")
    if health is None or not health.startswith("0.0.0.0:"):
        fail("k8s: server.flags must open the health port for the kubelet "
             "(--health_listen=0.0.0.0:PORT)")
    health_port = port_of(health)
    if health_port == port_of(flag_value(flag_list, "listen")):
        fail("k8s: the health port is the gRPC port")
    if {"name": "health", "containerPort": health_port} not in c["ports"]:
        fail(f"k8s: the container does not declare its health port {health_port}")
    for probe in ("readinessProbe", "livenessProbe", "startupProbe"):
        if c[probe].get("grpc", {}).get("port") != health_port:
            fail(f"k8s: {probe} is not a native grpc probe on the health port {health_port}")
    # TLS and tokens from Secrets, mounted read-only where the flags read them.
    mounts = {m["name"]: m for m in c["volumeMounts"]}
    secret_volumes = {v["name"]: v["secret"]["secretName"] for v in pod["volumes"] if "secret" in v}
    for flag in ("tls_cert", "tls_key", "auth_tokens_file"):
        path = flag_value(flag_list, flag)
        if path is None:
            fail(f"k8s: server.flags has no --{flag}")
        # The deepest mount holding the path is the one the file comes from.
        mount = sorted((m for m in mounts.values()
                        if path.startswith(m["mountPath"].rstrip("/") + "/")),
                       key=lambda m: -len(m["mountPath"]))
        if not mount or mount[0]["name"] not in secret_volumes:
            fail(f"k8s: --{flag}={path} is not on a mounted Secret")
        if not mount[0].get("readOnly"):
            fail(f"k8s: the Secret behind --{flag} is not mounted read-only")
    examples = check_example_secrets(os.path.join(k8s_dir, "example-secrets"))
    if set(secret_volumes.values()) != examples:
        fail(f"k8s: the pod mounts Secrets {sorted(secret_volumes.values())}, "
             f"example-secrets/ shows {sorted(examples)}")
    check_network_policy(docs["NetworkPolicy"][0])
    for s in docs["Service"]:
        if any(p.get("targetPort") == "health" or p.get("port") == health_port
               for p in s["spec"]["ports"]):
            fail(f"k8s: Service {s['metadata']['name']} exposes the health port")
    if not pod["securityContext"].get("runAsNonRoot"):
        fail("k8s: the pod may run as root")
    check_table_flag("k8s/server.flags", flag_value(flag_list, "tuning_table"))
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
    check = re.search(r"^HEALTHCHECK .*\\\n.*health_probe --addr=127\.0\.0\.1:(\d+)", text, re.M)
    if not check:
        fail("Dockerfile: no HEALTHCHECK through health_probe on loopback")
    if not re.search(r"cp kernels/tuning/tables/\*\.table /out/tables/", text):
        fail("Dockerfile: the image does not carry the committed tuning tables in /opt/gemm/tables")
    cmd = re.search(r"^CMD (\[.*?\])$", text, re.M | re.S)
    if not cmd or f'"--health_listen=127.0.0.1:{check.group(1)}"' not in cmd.group(1):
        fail(f"Dockerfile: the HEALTHCHECK probes port {check.group(1)}, which CMD does not open "
             "with --health_listen")
    cmd_args = json.loads(cmd.group(1).replace("\\\n", ""))
    check_table_flag("Dockerfile CMD", flag_value(cmd_args, "tuning_table"))


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
    check_compose_tls(by_name["docker-compose.tls.yml"])
    k8s_dir = os.path.dirname(by_name["k8s/kustomization.yaml"])
    check_k8s(k8s_dir)
    check_dockerfile(by_name["Dockerfile"])

    kubectl = shutil.which("kubectl")
    if kubectl:
        # kustomize does not follow the runfiles' symlinked files: render a copy.
        copy = os.path.join(os.environ.get("TEST_TMPDIR", "/tmp"), "k8s")
        shutil.rmtree(copy, ignore_errors=True)
        shutil.copytree(k8s_dir, copy)
        for d in (copy, os.path.join(copy, "prometheus-adapter"),
                  os.path.join(copy, "example-secrets")):
            out = subprocess.run([kubectl, "kustomize", d], capture_output=True, text=True)
            if out.returncode != 0:
                fail(f"kubectl kustomize {d}:\n{out.stderr}")
            rendered = [o for o in yaml.safe_load_all(out.stdout) if o]
            print(f"kubectl kustomize {os.path.relpath(d, copy)}: {len(rendered)} objects")
            if d == copy:
                kinds = {o["kind"] for o in rendered}
                for kind in ("Deployment", "NetworkPolicy", "ConfigMap"):
                    if kind not in kinds:
                        fail(f"kubectl kustomize: no {kind} rendered")
                if "Secret" in kinds:
                    fail("kubectl kustomize: the main kustomization renders a Secret; an apply "
                         "would overwrite the real ones")
                if any(o["metadata"].get("namespace") != "gemm"
                       for o in rendered if o["kind"] != "Namespace"):
                    fail("kubectl kustomize: an object outside the gemm namespace")
    else:
        print("NOTE: kubectl not installed; `kubectl kustomize deploy/k8s` not rendered")
    print(f"PASS: {len(yamls)} YAML files lint clean; compose, k8s and Dockerfile checks pass")


if __name__ == "__main__":
    main()

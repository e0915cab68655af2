#!/usr/bin/python3
"""The Python client (gemm_client) beside the C++ client (`gemm_cli bench`) on
the same workloads against one server, in one run: for each operand size
(1 KiB .. 256 MiB by default) and each number of requests in flight (1, 16),
both clients send the same shape for the same time, and the throughput of
each and their ratio are printed.

A workload is fp32 D = A * B with A of the given size: M x 64 times 64 x 64
(so D is as large as A and the product is cheap next to moving the bytes,
which is what a client does). Operands of chunked_threshold_bytes (4 MiB)
and more go in chunks over the Transfer service on both sides. Requests in
flight are capped so that they hold at most --max_inflight_mib of operands and
results together; the cap is printed and is the same for both clients.

    bazel run //bench:py_client_bench -- --server=... --cli=...   (BUILD passes both)
    py_client_bench.py --cli=gemm_cli --target=host:port          (a running server)

Python side: threads sharing one blocking Client (--py_mode=threads), one
AsyncClient with N tasks (--py_mode=asyncio), or each in turn (both, the
default: a column and a ratio each).
"""

import argparse
import asyncio
import json
import os
import platform
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np

import gemm_client

INNER = 64  # K and N of every workload
DEADLINE_S = 300  # of each request, both clients


def parse_size(text):
    units = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
    t = text.strip().lower().rstrip("ib")
    return int(float(t[:-1]) * units[t[-1]]) if t[-1] in units else int(t)


def label(nbytes):
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if nbytes >= size:
            return f"{nbytes / size:g} {unit}"
    return f"{nbytes} B"


def cpp_run(cli, target, m, concurrency, duration):
    """gemm_cli bench on the workload: (requests/s of those that succeeded,
    failed requests)."""
    args = [cli, "bench", f"--target={target}", f"--m={m}", f"--n={INNER}", f"--k={INNER}",
            "--dtype=fp32", f"--concurrency={concurrency}", f"--duration_s={duration}",
            f"--deadline_ms={DEADLINE_S * 1000}", "--json"]
    out = subprocess.run(args, capture_output=True, text=True, timeout=duration + 3 * DEADLINE_S)
    try:
        run = json.loads(out.stdout)["runs"][0]
    except (ValueError, KeyError, IndexError):
        raise RuntimeError(f"gemm_cli exited {out.returncode}: {out.stderr[-2000:]}") from None
    return run["ok"] / run["duration_s"], run["errors"]


def workload(m, rng):
    a = rng.standard_normal((m, INNER), dtype=np.float32)
    b = rng.standard_normal((INNER, INNER), dtype=np.float32)
    return a, b


def py_threads(target, a, b, concurrency, duration):
    done = [0] * concurrency
    errors = [0] * concurrency
    with gemm_client.Client(target, timeout=DEADLINE_S) as client:
        client.matmul(a, b)  # connect and learn the server's limits first
        end = time.monotonic() + duration

        def slot(i):
            while time.monotonic() < end:
                try:
                    client.matmul(a, b)
                    done[i] += 1
                except gemm_client.GemmError:
                    errors[i] += 1

        start = time.monotonic()
        threads = [threading.Thread(target=slot, args=(i,)) for i in range(concurrency)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        elapsed = time.monotonic() - start
    return sum(done), sum(errors), elapsed


def py_asyncio(target, a, b, concurrency, duration):
    async def main():
        async with gemm_client.AsyncClient(target, timeout=DEADLINE_S) as client:
            await client.matmul(a, b)
            end = time.monotonic() + duration
            count = [0, 0]

            async def slot():
                while time.monotonic() < end:
                    try:
                        await client.matmul(a, b)
                        count[0] += 1
                    except gemm_client.GemmError:
                        count[1] += 1

            start = time.monotonic()
            await asyncio.gather(*[slot() for _ in range(concurrency)])
            return count[0], count[1], time.monotonic() - start
    return asyncio.run(main())


def start_server(binary, directory):
    port_file = os.path.join(directory, "bench_port")
    if os.path.exists(port_file):
        os.remove(port_file)
    proc = subprocess.Popen(
        [binary, "--listen=127.0.0.1:0", f"--port_file={port_file}", "--metrics_listen=",
         "--backend=cpu", "--drain_timeout=5s"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(600):
        if os.path.exists(port_file):
            with open(port_file) as f:
                text = f.read()
            if text.endswith("\n"):
                return proc, f"127.0.0.1:{text.strip()}"
        if proc.poll() is not None:
            raise RuntimeError(f"gemm_server exited {proc.returncode}")
        time.sleep(0.1)
    proc.kill()
    raise RuntimeError("gemm_server did not listen within 60 s")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cli", required=True, help="gemm_cli binary (the C++ client)")
    parser.add_argument("--server", help="gemm_server binary to start on the CPU backend")
    parser.add_argument("--target", help="a running server instead of --server")
    parser.add_argument("--sizes", default="1K,16K,256K,1M,4M,16M,64M,256M",
                        help="operand sizes (A's bytes; D is as large)")
    parser.add_argument("--concurrency", default="1,16", help="requests in flight")
    parser.add_argument("--duration_s", type=float, default=3.0, help="per client and workload")
    parser.add_argument("--max_inflight_mib", type=int, default=2048,
                        help="cap on operand and result bytes of the requests in flight")
    parser.add_argument("--py_mode", choices=("threads", "asyncio", "both"), default="both",
                        help="how the Python side keeps requests in flight")
    parser.add_argument("--json", action="store_true", help="also print the figures as JSON")
    args = parser.parse_args()
    if bool(args.server) == bool(args.target):
        parser.error("give exactly one of --server and --target")
    proc = None
    target = args.target
    if args.server:
        proc, target = start_server(args.server, tempfile.mkdtemp())
    try:
        with gemm_client.Client(target) as client:
            info = client.server_info()
        print(f"# {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}, "
              f"{platform.node()} ({os.cpu_count()} CPUs), server {info.version} "
              f"backend {info.backend}")
        print(f"# fp32 M x {INNER} * {INNER} x {INNER}; MB/s = operand + result bytes")
        modes = ("threads", "asyncio") if args.py_mode == "both" else (args.py_mode,)
        runners = {"threads": py_threads, "asyncio": py_asyncio}
        print(f"{'operand':>9} {'inflight':>8} {'c++ req/s':>10} {'c++ MB/s':>9}" +
              "".join(f" {m + ' req/s':>13} {m + '/c++':>12}" for m in modes))
        rng = np.random.default_rng(1)
        rows = []
        for size in [parse_size(s) for s in args.sizes.split(",")]:
            m = max(1, size // (4 * INNER))
            a, b = workload(m, rng)
            request_bytes = a.nbytes + b.nbytes + m * INNER * 4
            for wanted in [int(c) for c in args.concurrency.split(",")]:
                cap = max(1, (args.max_inflight_mib << 20) // request_bytes)
                inflight = min(wanted, cap)
                cpp_rps, cpp_failed = cpp_run(args.cli, target, m, inflight, args.duration_s)
                row = {"operand_bytes": a.nbytes, "inflight": inflight,
                       "cpp_requests_per_s": cpp_rps,
                       "cpp_mb_per_s": cpp_rps * request_bytes / 1e6, "cpp_failed": cpp_failed}
                cells = ""
                for mode in modes:
                    count, failed, elapsed = runners[mode](target, a, b, inflight,
                                                           args.duration_s)
                    rps = count / elapsed
                    ratio = rps / cpp_rps if cpp_rps else float("nan")
                    row.update({f"py_{mode}_requests_per_s": rps, f"py_{mode}_ratio": ratio,
                                f"py_{mode}_failed": failed})
                    cells += f" {rps:>13.1f} {ratio:>12.2f}"
                failures = [f"{k[:-7]} {v}" for k, v in row.items()
                            if k.endswith("_failed") and v]
                shown = f"{inflight}" if inflight == wanted else f"{inflight} (cap)"
                print(f"{label(a.nbytes):>9} {shown:>8} {cpp_rps:>10.1f} "
                      f"{row['cpp_mb_per_s']:>9.1f}{cells}"
                      + (f"  failed: {', '.join(failures)}" if failures else ""), flush=True)
                rows.append(row)
        if args.json:
            print(json.dumps({"target": target, "runs": rows}))
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())

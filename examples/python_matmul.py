#!/usr/bin/python3
"""The README's Python example as a complete program: connects to a
gemm_server, multiplies fp32 and bf16 problems through gemm_client, checks
them against numpy in float64 and prints OK.

    python_matmul.py --target=localhost:50051

Exit status: 0 when the results match, 1 on a mismatch or an error.
"""

import argparse
import sys

import numpy as np

import gemm_client


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", default="localhost:50051", help="gemm_server host:port")
    target = parser.parse_args().target
    rng = np.random.default_rng(0)
    a_data = rng.standard_normal((256, 128), dtype=np.float32)
    b_data = rng.standard_normal((128, 64), dtype=np.float32)
    try:
        # [readme-example-begin]
        with gemm_client.Client(target, timeout=30) as client:
            d = client.matmul(a_data, b_data)  # float32, 256 x 64

            # bf16 travels as uint16 bits; the result here comes back as float32.
            a16, b16 = gemm_client.to_bf16(a_data), gemm_client.to_bf16(b_data)
            d16 = client.matmul(a16, np.asfortranarray(b16), out_dtype=np.float32)  # column-major b

            # A matrix kept on the server, used by handle until the block ends.
            with client.register(b_data) as b_dev:
                d2 = client.matmul(a_data, b_dev, alpha=2.0)
        # [readme-example-end]
    except gemm_client.GemmError as e:
        print(f"python_matmul: {e.code.name}: {e.message}", file=sys.stderr)
        return 1
    ref = a_data.astype(np.float64) @ b_data.astype(np.float64)
    ref16 = (gemm_client.from_bf16(a16).astype(np.float64) @
             gemm_client.from_bf16(b16).astype(np.float64))
    checks = [("fp32", d, ref, 1e-5), ("bf16", d16, ref16, 2e-2), ("resident", d2, 2 * ref, 1e-5)]
    for name, out, want, tol in checks:
        err = np.linalg.norm(out - want) / np.linalg.norm(want)
        if not err <= tol:
            print(f"python_matmul: {name}: relative error {err:.3g} over {tol}", file=sys.stderr)
            return 1
        print(f"{name}: {out.shape[0]} x {out.shape[1]}, relative error {err:.2e}")
    print(f"python_matmul against {target}: OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())

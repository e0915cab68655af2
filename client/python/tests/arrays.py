"""Random operands and error measures shared by the tests that run against
a real server."""

import numpy as np

import gemm_client


def rand(rng, rows, cols, dtype=np.float32, order="C"):
    """Values in [-1, 1) of `dtype` ("bf16": uint16 bits) in `order`."""
    x = rng.uniform(-1, 1, size=(rows, cols)).astype(np.float32)
    x = gemm_client.to_bf16(x) if dtype == "bf16" else x.astype(dtype)
    return np.asfortranarray(x) if order == "F" else x


def f64(x):
    """`x` as float64 (uint16 arrays read as bf16)."""
    return gemm_client.from_bf16(x).astype(np.float64) if x.dtype == np.uint16 else \
        x.astype(np.float64)


def rel(out, ref):
    """Relative Frobenius error of `out` against the float64 `ref`."""
    return np.linalg.norm(f64(out) - ref) / np.linalg.norm(ref)

"""A Python client of the GEMM offload service (gemm.v1): numpy in, numpy out.

    import numpy as np
    import gemm_client

    with gemm_client.Client("localhost:50051") as client:
        d = client.matmul(np.ones((64, 32), np.float32), np.ones((32, 16), np.float32))

Client is blocking (and thread-safe); AsyncClient is the same on asyncio
(grpc.aio). Failures raise GemmError with the gRPC code and message
(arguments refused before sending: InvalidArgumentError, also a ValueError).
bf16 matrices are uint16 arrays of bf16 bits (to_bf16 / from_bf16 convert).
FP8 operands are Fp8Matrix objects (uint8 codes with float32 scales);
quantize_fp8 makes one by the server's rule, dequantize_fp8 reads one back.
A client on the server's host may name matrices in a SharedMemory region
instead of sending them (shared_memory.py, or the shared_memory setting).
"""

from gemm_client.aio import AsyncClient
from gemm_client.client import Client
from gemm_client.dtypes import BF16, DType, from_bf16, to_bf16
from gemm_client.errors import GemmError, InvalidArgumentError
from gemm_client.fp8 import Fp8Matrix, Fp8Quantization, GemmResult, Precision
from gemm_client.fp8 import dequantize as dequantize_fp8
from gemm_client.fp8 import quantize as quantize_fp8
from gemm_client.planning import supports_deterministic
from gemm_client.problems import Problem
from gemm_client.resident import ResidentMatrix
from gemm_client.retry import RetryPolicy
from gemm_client.shared_memory import SharedMemory

__all__ = [
    "AsyncClient", "BF16", "Client", "DType", "Fp8Matrix", "Fp8Quantization", "GemmError",
    "GemmResult", "InvalidArgumentError", "Precision", "Problem", "ResidentMatrix",
    "RetryPolicy", "SharedMemory", "dequantize_fp8", "from_bf16", "quantize_fp8",
    "supports_deterministic", "to_bf16",
]

"""numpy operands -> gemm.v1 problems, and results -> numpy.

An operand is sent in the layout it has in memory: a C-ordered array as
row-major, a Fortran-ordered one (such as `x.T` of a C-ordered `x`) as
column-major, so neither is transposed or copied on the way (the bytes are
copied once, into the message). Other strided views are made contiguous
first (one copy). Shapes and types are checked here, before anything is
sent, with the field at fault named as the server names it.
"""

import dataclasses

import grpc
import numpy as np

from gemm.v1 import gemm_pb2

from gemm_client.dtypes import DType
from gemm_client.errors import GemmError, invalid_argument

ROW_MAJOR = gemm_pb2.LAYOUT_ROW_MAJOR
COL_MAJOR = gemm_pb2.LAYOUT_COL_MAJOR


@dataclasses.dataclass
class Problem:
    """One D = alpha * op(A) * op(B) + beta * C, as `Client.matmul` takes it.

    a, b, c: 2-D numpy arrays (float32, float16, or uint16 holding bf16) or
    ResidentMatrix objects. op(X) is X, or X transposed when transpose_x.
    out_dtype: the type of C and D (None = the input type).
    """

    a: object
    b: object
    c: object = None
    alpha: float = 1.0
    beta: float = 0.0
    transpose_a: bool = False
    transpose_b: bool = False
    out_dtype: object = None
    allow_tf32: bool = False


@dataclasses.dataclass
class Operand:
    """One matrix as stored: its bytes (a contiguous array) or a handle."""

    rows: int
    cols: int
    dtype: DType
    layout: int
    array: np.ndarray = None
    handle: str = ""

    @property
    def nbytes(self):
        return self.rows * self.cols * self.dtype.itemsize

    def flat_bytes(self):
        """The stored bytes as a flat memoryview (no copy)."""
        stored = self.array if self.layout == ROW_MAJOR else self.array.T
        return memoryview(np.ascontiguousarray(stored)).cast("B")


@dataclasses.dataclass
class Prepared:
    """A checked problem: its shape-only proto, operands, and result shape."""

    proto: object  # gemm_pb2.GemmProblem without operands
    operands: dict  # "a", "b" (and "c") -> Operand
    out_dtype: DType
    out_layout: int

    @property
    def result_bytes(self):
        return self.proto.m * self.proto.n * self.out_dtype.itemsize


def operand(value, field):
    """An Operand from an array or a ResidentMatrix; GemmError naming `field`."""
    if hasattr(value, "handle") and hasattr(value, "layout"):
        return Operand(value.rows, value.cols, value.dtype, value.layout, handle=value.handle)
    if value is None:
        raise invalid_argument(f"{field}: is required")
    array = np.asarray(value)
    if array.ndim != 2:
        raise invalid_argument(f"{field}: must be a 2-D matrix, got {array.ndim} dimensions")
    try:
        dtype = DType.of(array.dtype, field)
    except ValueError as e:
        raise invalid_argument(
            f"{e} (convert first, e.g. {field}.astype(numpy.float32))") from None
    if array.shape[0] == 0 or array.shape[1] == 0:
        raise invalid_argument(f"{field}: has an empty dimension {array.shape}")
    if array.dtype != dtype.numpy:
        array = array.astype(dtype.numpy)  # big-endian input: the wire is little-endian
    if array.flags.c_contiguous:
        layout = ROW_MAJOR
    elif array.flags.f_contiguous:
        layout = COL_MAJOR
    else:
        array = np.ascontiguousarray(array)
        layout = ROW_MAJOR
    return Operand(array.shape[0], array.shape[1], dtype, layout, array=array)


def prepare(problem, field_prefix=""):
    """Checks `problem` (a Problem) and returns its Prepared form."""
    p = problem
    f = field_prefix
    a = operand(p.a, f + "a")
    b = operand(p.b, f + "b")
    m, k = (a.cols, a.rows) if p.transpose_a else (a.rows, a.cols)
    kb, n = (b.cols, b.rows) if p.transpose_b else (b.rows, b.cols)
    if kb != k:
        raise invalid_argument(
            f"{f}b: op(b) is {kb} x {n} but op(a) is {m} x {k}: "
            f"the inner dimensions (k) differ")
    if b.dtype is not a.dtype:
        raise invalid_argument(
            f"{f}b: element type {b.dtype.name} differs from a's {a.dtype.name}")
    try:
        out_dtype = a.dtype if p.out_dtype is None else DType.of(p.out_dtype, f + "out_dtype")
    except ValueError as e:
        raise invalid_argument(str(e)) from None
    if p.allow_tf32 and a.dtype is not DType.FP32:
        raise invalid_argument(f"{f}allow_tf32: applies to float32 inputs only, "
                               f"these are {a.dtype.name}")
    operands = {"a": a, "b": b}
    out_layout = ROW_MAJOR
    beta = float(p.beta)
    if p.c is not None:
        c = operand(p.c, f + "c")
        if (c.rows, c.cols) != (m, n):
            raise invalid_argument(f"{f}c: is {c.rows} x {c.cols}, the result is {m} x {n}")
        if c.dtype is not out_dtype:
            raise invalid_argument(
                f"{f}c: element type {c.dtype.name} differs from the output type "
                f"{out_dtype.name}")
        operands["c"] = c
        out_layout = c.layout
    elif beta != 0.0:
        raise invalid_argument(f"{f}c: is required when beta != 0 (beta = {beta})")
    proto = gemm_pb2.GemmProblem(
        m=m, n=n, k=k, input_dtype=a.dtype.proto, output_dtype=out_dtype.proto,
        transpose_a=bool(p.transpose_a), transpose_b=bool(p.transpose_b),
        allow_tf32=bool(p.allow_tf32), output_layout=out_layout)
    if float(p.alpha) != 1.0:
        proto.alpha = float(p.alpha)
    if beta != 0.0:
        proto.beta = beta
    return Prepared(proto, operands, out_dtype, out_layout)


def decode_result(result, field):
    """A GemmResult's data as a new numpy array in the result's layout."""
    dtype = DType.from_proto(result.dtype)
    expected = result.rows * result.cols * dtype.itemsize
    if len(result.data) != expected:
        raise GemmError(
            grpc.StatusCode.DATA_LOSS,
            f"{field}: the server sent {len(result.data)} bytes for a {result.rows} x "
            f"{result.cols} {dtype.name} result ({expected} expected)")
    flat = np.frombuffer(result.data, dtype=dtype.numpy).copy()
    return shaped(flat, result.rows, result.cols, result.layout)


def shaped(flat, rows, cols, layout):
    """A flat array of a matrix's stored bytes as the rows x cols matrix."""
    if layout == COL_MAJOR:
        return flat.reshape((cols, rows)).T
    return flat.reshape((rows, cols))

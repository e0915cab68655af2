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

from gemm_client import fp8
from gemm_client.dtypes import DType
from gemm_client.errors import GemmError, invalid_argument

ROW_MAJOR = gemm_pb2.LAYOUT_ROW_MAJOR
COL_MAJOR = gemm_pb2.LAYOUT_COL_MAJOR


@dataclasses.dataclass
class Problem:
    """One D = alpha * op(A) * op(B) + beta * C, as `Client.matmul` takes it.

    a, b, c: 2-D numpy arrays (float32, float16, or uint16 holding bf16) or
    ResidentMatrix objects; a and b may also be FP8 (fp8.Fp8Matrix, or a
    ResidentMatrix registered with quantize), both or, with quantize_partner,
    one of them beside a float32 or bf16 partner that the server quantizes to
    the FP8 one's format and scale mode. op(X) is X, or X transposed when
    transpose_x. out_dtype: the type of C and D (None = the input type, or
    float32 for FP8 inputs; never FP8). out: an array in a shared-memory
    region registered with the client (shared_memory.py), M x N of the
    output type, C- or Fortran-ordered: D is written there (in its layout)
    and it is the result.
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
    quantize_partner: bool = False
    out: object = None


@dataclasses.dataclass
class Operand:
    """One matrix as stored: its bytes (a contiguous array) or a handle; for
    an FP8 one given by codes, its scales (flat float32) and their mode; for
    one to register as FP8, the gemm.v1 Quantization; for one in a
    registered shared-memory region, its gemm.v1 SharedMemoryRef (array is
    then the view of the region)."""

    rows: int
    cols: int
    dtype: DType
    layout: int
    array: np.ndarray = None
    handle: str = ""
    scales: np.ndarray = None
    scale_mode: str = ""
    quantize: object = None
    shared: object = None

    def scales_proto(self):
        """gemm.v1 Scales for this operand, or None."""
        if self.scales is None:
            return None
        return gemm_pb2.Scales(mode=fp8.scale_mode_proto(self.scale_mode),
                               data=self.scales.astype("<f4").tobytes())

    @property
    def scale_bytes(self):
        return 0 if self.scales is None else 4 * self.scales.size

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
    # The array D is written into (GemmProblem.output), and whether the
    # result is a copy of it (the client's own region) or it itself.
    out: np.ndarray = None
    copy_out: bool = False

    @property
    def d_bytes(self):
        return self.proto.m * self.proto.n * self.out_dtype.itemsize

    @property
    def result_bytes(self):
        """What the result adds to the response."""
        return 0 if self.out is not None else self.d_bytes


def operand(value, field, locate=None):
    """An Operand from an array or a ResidentMatrix; GemmError naming `field`.
    locate(array, field): the SharedMemoryRef of an array in a registered
    shared-memory region, or None."""
    if hasattr(value, "handle") and hasattr(value, "layout"):
        return Operand(value.rows, value.cols, value.dtype, value.layout, handle=value.handle)
    if value is None:
        raise invalid_argument(f"{field}: is required")
    if isinstance(value, fp8.Fp8Matrix):
        return _fp8_operand(value, field)
    array = np.asarray(value)
    if array.ndim != 2:
        raise invalid_argument(f"{field}: must be a 2-D matrix, got {array.ndim} dimensions")
    if array.dtype == np.uint8:
        raise invalid_argument(
            f"{field}: a uint8 array is taken for FP8 codes only inside an "
            f"Fp8Matrix(codes, scales, format, mode), which names the format and scales")
    try:
        dtype = DType.of(array.dtype, field)
    except ValueError as e:
        raise invalid_argument(
            f"{e} (convert first, e.g. {field}.astype(numpy.float32))") from None
    ref = locate(array, field) if locate is not None else None
    if ref is not None:
        if array.dtype != dtype.numpy:
            raise invalid_argument(f"{field}: a shared-memory matrix must be little-endian "
                                   f"{dtype.numpy}, got {array.dtype}")
        if 0 in array.shape:
            raise invalid_argument(f"{field}: has an empty dimension {array.shape}")
        layout = ROW_MAJOR if array.flags.c_contiguous else COL_MAJOR
        return Operand(array.shape[0], array.shape[1], dtype, layout, array=array, shared=ref)
    return _stored(array, dtype, field)


def _fp8_operand(value, field):
    """The Operand of an Fp8Matrix; its scales are checked in prepare(), which
    knows the slot and transpose."""
    try:
        dtype = fp8.fp8_format(value.format, f"{field}.format")
        mode = fp8.scale_mode(value.mode, f"{field}.mode")
    except ValueError as e:
        raise invalid_argument(str(e)) from None
    codes = value.codes
    if hasattr(codes, "handle") and hasattr(codes, "layout"):
        # FP8 codes registered as they are: resident, with the scales sent here.
        if codes.dtype is not dtype:
            raise invalid_argument(f"{field}.codes: the resident matrix holds "
                                   f"{codes.dtype.name}, the format is {dtype.name}")
        return Operand(codes.rows, codes.cols, dtype, codes.layout, handle=codes.handle,
                       scales=value.scales, scale_mode=mode)
    array = np.asarray(codes)
    if array.ndim != 2:
        raise invalid_argument(
            f"{field}.codes: must be a 2-D matrix, got {array.ndim} dimensions")
    if array.dtype != np.uint8:
        raise invalid_argument(f"{field}.codes: FP8 codes must be a uint8 array, got "
                               f"{array.dtype}")
    op = _stored(array, dtype, field)
    op.scales = value.scales
    op.scale_mode = mode
    return op


def _stored(array, dtype, field):
    """An Operand of a 2-D array of `dtype`, in the layout it has."""
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


def prepare(problem, field_prefix="", locate=None):
    """Checks `problem` (a Problem) and returns its Prepared form; `locate`
    as operand() takes it (None: no shared memory)."""
    p = problem
    f = field_prefix
    a = operand(p.a, f + "a", locate)
    b = operand(p.b, f + "b", locate)
    m, k = (a.cols, a.rows) if p.transpose_a else (a.rows, a.cols)
    kb, n = (b.cols, b.rows) if p.transpose_b else (b.rows, b.cols)
    if kb != k:
        raise invalid_argument(
            f"{f}b: op(b) is {kb} x {n} but op(a) is {m} x {k}: "
            f"the inner dimensions (k) differ")
    is_fp8 = a.dtype.is_fp8 or b.dtype.is_fp8
    if is_fp8:
        _check_fp8_pair(a, b, p, f)
    elif p.quantize_partner:
        raise invalid_argument(f"{f}quantize_partner: needs one FP8 operand, "
                               f"a and b are {a.dtype.name}")
    elif b.dtype is not a.dtype:
        raise invalid_argument(
            f"{f}b: element type {b.dtype.name} differs from a's {a.dtype.name}")
    try:
        default_out = DType.FP32 if is_fp8 else a.dtype
        out_dtype = (default_out if p.out_dtype is None
                     else DType.of(p.out_dtype, f + "out_dtype"))
    except ValueError as e:
        raise invalid_argument(str(e)) from None
    if out_dtype.is_fp8:
        raise invalid_argument(f"{f}out_dtype: FP8 outputs are not offered "
                               "(float32, float16 or bf16)")
    if p.allow_tf32 and a.dtype is not DType.FP32:
        raise invalid_argument(f"{f}allow_tf32: applies to float32 inputs only, "
                               f"these are {a.dtype.name}")
    operands = {"a": a, "b": b}
    out_layout = ROW_MAJOR
    beta = float(p.beta)
    if p.c is not None:
        c = operand(p.c, f + "c", locate)
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
    out, out_ref = None, None
    if p.out is not None:
        out, out_ref = _output(p.out, m, n, out_dtype, f + "out", locate)
        out_layout = ROW_MAJOR if out.flags.c_contiguous else COL_MAJOR
    proto = gemm_pb2.GemmProblem(
        m=m, n=n, k=k, input_dtype=a.dtype.proto, output_dtype=out_dtype.proto,
        transpose_a=bool(p.transpose_a), transpose_b=bool(p.transpose_b),
        allow_tf32=bool(p.allow_tf32), output_layout=out_layout)
    if b.dtype is not a.dtype:
        proto.b_dtype = b.dtype.proto
    if p.quantize_partner:
        proto.quantize_partner = True
    if float(p.alpha) != 1.0:
        proto.alpha = float(p.alpha)
    if beta != 0.0:
        proto.beta = beta
    if out_ref is not None:
        proto.output.CopyFrom(out_ref)
    return Prepared(proto, operands, out_dtype, out_layout, out=out)


def _output(value, m, n, out_dtype, field, locate):
    """(array, SharedMemoryRef) of an `out` array, checked."""
    ref = None
    if isinstance(value, np.ndarray) and locate is not None:
        ref = locate(value, field)
    if ref is None:
        raise invalid_argument(f"{field}: must be a numpy array in a shared-memory region "
                               "registered with this client (Client.register_shared_memory)")
    if value.shape != (m, n):
        raise invalid_argument(f"{field}: has shape {value.shape}, the result is {m} x {n}")
    if value.dtype != out_dtype.numpy:
        raise invalid_argument(f"{field}: element type {value.dtype} is not the output type "
                               f"{out_dtype.name} ({np.dtype(out_dtype.numpy)})")
    return value, ref


def _check_fp8_pair(a, b, p, f):
    """An FP8 problem's operand types and scales, as the server checks them."""
    for name, op, other, transposed in (("a", a, b, p.transpose_a), ("b", b, a, p.transpose_b)):
        if not op.dtype.is_fp8:
            if not p.quantize_partner:
                raise invalid_argument(
                    f"{f}quantize_partner: {name} is {op.dtype.name} beside an FP8 "
                    f"{'b' if name == 'a' else 'a'}; set quantize_partner to have the server "
                    "quantize it, or pass both as FP8")
            if op.dtype not in (DType.FP32, DType.BF16):
                raise invalid_argument(f"{f}{name}: a partner quantized by the server must "
                                       f"be float32 or bf16, not {op.dtype.name}")
            continue
        if op.handle and op.scales is None:
            continue  # a matrix the server quantized keeps its own scales
        try:
            op.scales = fp8.check_scales(op.scales, (op.rows, op.cols), op.scale_mode, name,
                                         transposed, f"{f}{name}.scales")
        except ValueError as e:
            raise invalid_argument(str(e)) from None
    if a.dtype.is_fp8 and b.dtype.is_fp8 and p.quantize_partner:
        raise invalid_argument(f"{f}quantize_partner: a and b are both FP8 already")


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

"""FP8 operands on the client: the codec, the scale layouts and the
quantization rule of common/fp8.h, in vectorised numpy.

An FP8 matrix is a numpy uint8 array of codes (e4m3 "e4m3fn": bias 7, no
infinities, NaN = S.1111.111, largest 448; e5m2: bias 15, IEEE-style
infinities and NaNs, largest 57344) with float32 scales, the real value of
an element being its FP8 value times its scale. The scales are laid out in
op() coordinates (op(X) = X, or X.T when the problem transposes it), for
the operand the matrix is in a problem (A is M x K, B is K x N):

  tensor:  one scale.
  channel: A: M scales, one per row i of op(A); B: N, one per column j.
  block:   any K, in KB = ceil(K/128) blocks along K, the last one partial
           where K % 128 != 0 (its scale from its real elements only).
           A: M x KB row-major, the scale of (i, k) at i * KB + k/128.
           B: KB x ceil(N/128) row-major, the scale of (k, j) at
           (k/128) * ceil(N/128) + j/128.

Quantization of a group (the tensor, a channel, a block): amax = max |x|;
scale = fp32(amax / FMT_MAX), 1 where amax is 0 and at least the smallest
positive fp32; code = round-to-nearest-even of the exact quotient x / scale,
saturated to +-FMT_MAX. The server applies the same rule on register and
for quantize_partner, so both give the same codes for the same input.
"""

import dataclasses

import numpy as np

from gemm.v1 import gemm_pb2

from gemm_client.dtypes import DType, from_bf16

BLOCK_K = 128

_MODES = {"tensor": gemm_pb2.SCALE_MODE_TENSOR, "channel": gemm_pb2.SCALE_MODE_CHANNEL,
          "block": gemm_pb2.SCALE_MODE_BLOCK}
_MODE_NAMES = {v: k for k, v in _MODES.items()}
_OPERANDS = {"a": gemm_pb2.OPERAND_A, "b": gemm_pb2.OPERAND_B}


@dataclasses.dataclass(frozen=True)
class _Spec:
    mantissa_bits: int
    bias: int
    max_code: int  # the largest finite positive code
    max_value: float


_SPECS = {DType.FP8_E4M3: _Spec(3, 7, 0x7E, 448.0), DType.FP8_E5M2: _Spec(2, 15, 0x7B, 57344.0)}


def fp8_format(spec, field="format"):
    """The FP8 DType `spec` names ("e4m3", "fp8_e5m2", a DType); ValueError
    naming `field` otherwise."""
    try:
        d = DType.of(spec, field)
    except ValueError:
        d = None
    if d not in _SPECS:
        raise ValueError(f"{field}: {spec!r} is not an FP8 format (e4m3 or e5m2)")
    return d


def scale_mode(spec, field="mode"):
    """"tensor", "channel" or "block" (any case); ValueError naming `field`."""
    if isinstance(spec, str) and spec.lower() in _MODES:
        return spec.lower()
    raise ValueError(f"{field}: {spec!r} is not a scale mode (tensor, channel or block)")


def scale_mode_proto(mode):
    return _MODES[mode]


def scale_mode_name(proto_value):
    return _MODE_NAMES.get(proto_value, "none")


def operand_role(spec, field="operand"):
    if isinstance(spec, str) and spec.lower() in _OPERANDS:
        return spec.lower()
    raise ValueError(f"{field}: {spec!r} is not an operand (a or b)")


def fp8_max(format):  # pylint: disable=redefined-builtin
    """448.0 for e4m3, 57344.0 for e5m2."""
    return _SPECS[fp8_format(format)].max_value


# ---- Element codec ----------------------------------------------------------

def _decode_table(format):  # pylint: disable=redefined-builtin
    f = _SPECS[format]
    codes = np.arange(256, dtype=np.int64)
    exp_bits = 7 - f.mantissa_bits
    exp = (codes >> f.mantissa_bits) & ((1 << exp_bits) - 1)
    man = codes & ((1 << f.mantissa_bits) - 1)
    normal = np.ldexp(((1 << f.mantissa_bits) | man).astype(np.float64),
                      (exp - f.bias - f.mantissa_bits).astype(np.int32))
    subnormal = np.ldexp(man.astype(np.float64), 1 - f.bias - f.mantissa_bits)
    magnitude = np.where(exp == 0, subnormal, normal)
    all_ones = (1 << exp_bits) - 1
    if format is DType.FP8_E4M3:
        magnitude[(exp == all_ones) & (man == (1 << f.mantissa_bits) - 1)] = np.nan
    else:
        magnitude[(exp == all_ones) & (man == 0)] = np.inf
        magnitude[(exp == all_ones) & (man != 0)] = np.nan
    return np.where(codes & 0x80, -magnitude, magnitude).astype(np.float32)


_TABLES = {d: _decode_table(d) for d in _SPECS}


def decode_codes(codes, format):  # pylint: disable=redefined-builtin
    """FP8 codes (uint8) -> their values as float32 (exact), same shape."""
    return _TABLES[fp8_format(format)][_uint8(codes, "codes")]


def encode(values, format):  # pylint: disable=redefined-builtin
    """The FP8 code nearest to each value (ties to even), as uint8: magnitudes
    past FMT_MAX, infinities included, saturate to +-FMT_MAX; NaN gives the
    format's NaN (0x7f, or 0x7e on e5m2, with the value's sign). Values are
    taken as float64, so a quotient computed in float64 rounds only once."""
    f = _SPECS[fp8_format(format)]
    x = np.ascontiguousarray(values, dtype=np.float64)
    u = x.view(np.uint64)
    one = np.uint64(1)
    sign = ((u >> np.uint64(56)) & np.uint64(0x80)).astype(np.uint8)
    a = u & np.uint64(0x7FFFFFFFFFFFFFFF)
    inf_bits = np.uint64(0x7FF0000000000000)
    biased = (a >> np.uint64(52)).astype(np.int64)
    e = biased - 1023
    emin = 1 - f.bias

    # Normal FP8: round the 52-bit mantissa to mantissa_bits, ties to even; a
    # carry moves into the exponent, which is the right next code.
    shift = np.uint64(52 - f.mantissa_bits)
    with np.errstate(over="ignore"):
        rounded = a + ((one << (shift - one)) - one) + ((a >> shift) & one)
        code = (rounded >> shift).astype(np.int64) - ((1023 - f.bias) << f.mantissa_bits)
    normal = np.minimum(code, f.max_code)

    # Subnormal FP8: the value in units of 2^(emin - mantissa_bits).
    man = (a & ((one << np.uint64(52)) - one)) | (one << np.uint64(52))
    sub_shift = np.clip(52 + emin - f.mantissa_bits - e, 1, 63).astype(np.uint64)
    units = man >> sub_shift
    rem = man & ((one << sub_shift) - one)
    halfway = one << (sub_shift - one)
    up = (rem > halfway) | ((rem == halfway) & ((units & one) == one))
    subnormal = (units + up.astype(np.uint64)).astype(np.int64)
    subnormal = np.where(52 + emin - f.mantissa_bits - e >= 54, 0, subnormal)

    magnitude = np.where(e >= emin, normal, subnormal)
    magnitude = np.where(biased == 0, 0, magnitude)  # zero, or a float64 subnormal
    magnitude = np.where(a == inf_bits, f.max_code, magnitude)
    nan_code = 0x7F if f.mantissa_bits == 3 else 0x7E
    magnitude = np.where(a > inf_bits, nan_code, magnitude)
    return (sign | magnitude.astype(np.uint8)).reshape(np.shape(values))


# ---- Scale layouts ----------------------------------------------------------

def _geometry(shape, operand, transposed):
    """(outer, k, outer_is_row) of a stored rows x cols matrix used as
    `operand` ("a" or "b"), transposed or not: outer is M for A, N for B."""
    rows, cols = shape
    outer_is_row = (operand == "a") != bool(transposed)
    return (rows, cols, True) if outer_is_row else (cols, rows, False)


def scale_count(shape, mode, operand, transposed=False):
    """How many scales `mode` needs for a stored matrix of `shape` used as
    `operand` ("a" or "b"), transposed or not."""
    outer, k, _ = _geometry(shape, operand, transposed)
    if mode == "tensor":
        return 1
    if mode == "channel":
        return outer
    kb, ob = -(-k // BLOCK_K), -(-outer // BLOCK_K)
    return outer * kb if operand == "a" else kb * ob


def _per_element(scales, shape, mode, operand, transposed):
    """The scale of every stored element, as a float32 array of `shape`."""
    outer, k, outer_is_row = _geometry(shape, operand, transposed)
    s = np.asarray(scales, dtype=np.float32).reshape(-1)
    if mode == "tensor":
        grid = np.broadcast_to(s[0], (outer, k))
    elif mode == "channel":
        grid = np.broadcast_to(s[:, None], (outer, k))
    elif operand == "a":
        grid = np.repeat(s.reshape(outer, -(-k // BLOCK_K)), BLOCK_K, axis=1)[:, :k]
    else:
        ob = -(-outer // BLOCK_K)
        grid = np.repeat(np.repeat(s.reshape(-(-k // BLOCK_K), ob).T, BLOCK_K, axis=0)[:outer],
                         BLOCK_K, axis=1)[:, :k]
    return grid if outer_is_row else grid.T


def _amax(x, mode, operand, transposed):
    """max |x| per group, in the scales' order (float32)."""
    outer, k, outer_is_row = _geometry(x.shape, operand, transposed)
    xo = np.abs(x if outer_is_row else x.T)  # outer x k
    if mode == "tensor":
        return np.array([xo.max()], dtype=np.float32)
    if mode == "channel":
        return xo.max(axis=1)
    # Zeros pad K (and B's N) to whole blocks: |x| >= 0, so a partial
    # block's amax is that of its real elements.
    kb = -(-k // BLOCK_K)
    if operand == "a":
        padded = np.zeros((outer, kb * BLOCK_K), dtype=np.float32)
        padded[:, :k] = xo
        return padded.reshape(outer, kb, BLOCK_K).max(axis=2).reshape(-1)
    ob = -(-outer // BLOCK_K)
    padded = np.zeros((ob * BLOCK_K, kb * BLOCK_K), dtype=np.float32)
    padded[:outer, :k] = xo
    return padded.reshape(ob, BLOCK_K, kb, BLOCK_K).max(axis=(1, 3)).T.reshape(-1)


def scale_for_amax(amax, format):  # pylint: disable=redefined-builtin
    """The rule's scale for each group's amax (float32 in, float32 out)."""
    amax = np.asarray(amax, dtype=np.float32)
    scale = amax / np.float32(_SPECS[fp8_format(format)].max_value)
    scale = np.where(scale > 0, scale, np.float32(np.finfo(np.float32).smallest_subnormal))
    return np.where(amax == 0, np.float32(1), scale).astype(np.float32)


# ---- Matrices ---------------------------------------------------------------

@dataclasses.dataclass
class Fp8Quantization:
    """How to quantize a matrix: the FP8 format ("e4m3", "e5m2"), the scale
    mode ("tensor", "channel", "block"), the operand it will be ("a", "b"),
    and whether problems transpose it. The gemm.v1 Quantization of register
    and the arguments of quantize()."""

    format: object = "e4m3"
    mode: str = "tensor"
    operand: str = "a"
    transposed: bool = False

    def checked(self, field="quantize"):
        """The same with format a DType and names lower case; ValueError naming
        the bad field."""
        return Fp8Quantization(fp8_format(self.format, f"{field}.format"),
                               scale_mode(self.mode, f"{field}.mode"),
                               operand_role(self.operand, f"{field}.operand"),
                               bool(self.transposed))

    def to_proto(self):
        q = self.checked()
        return gemm_pb2.Quantization(format=q.format.proto, mode=_MODES[q.mode],
                                     operand=_OPERANDS[q.operand], transposed=q.transposed)


@dataclasses.dataclass
class Fp8Matrix:
    """An FP8 operand: `codes` (2-D uint8, C- or Fortran-ordered; or the
    ResidentMatrix that Client.register(fp8_matrix) made of them), `scales`
    (float32, laid out for `mode` as the operand it is in a problem, see the
    module docstring), `format` ("e4m3", "e5m2" or the DType) and `mode`.
    quantize() makes one; pass it as a or b of a problem in the slot (and with
    the transpose) its scales were made for."""

    codes: np.ndarray
    scales: np.ndarray
    format: object = "e4m3"
    mode: str = "tensor"

    @property
    def shape(self):
        c = self.codes
        return c.shape if hasattr(c, "handle") else np.shape(c)

    def to_float32(self, operand="a", transposed=False):
        """The real values (code x scale, in float32), as the server
        dequantizes them, with the scales read as `operand`'s."""
        return dequantize(self, operand, transposed)


def _uint8(codes, field):
    c = np.asarray(codes)
    if c.dtype != np.uint8:
        raise ValueError(f"{field}: FP8 codes must be a uint8 array, got {c.dtype}")
    return c


def _float32_source(x, field):
    """x as float32: float32, float16 (exact), or bf16 bits in uint16."""
    arr = np.asarray(x)
    if arr.ndim != 2:
        raise ValueError(f"{field}: must be a 2-D matrix, got {arr.ndim} dimensions")
    if arr.shape[0] == 0 or arr.shape[1] == 0:
        raise ValueError(f"{field}: has an empty dimension {arr.shape}")
    kind = arr.dtype.newbyteorder("<") if arr.dtype.byteorder != "|" else arr.dtype
    if kind == np.dtype("<u2"):
        return from_bf16(arr.astype("<u2"))
    if kind in (np.dtype("<f4"), np.dtype("<f2")):
        return arr.astype(np.float32)
    raise ValueError(f"{field}: quantizes float32, float16 or bf16 (uint16 bits), got "
                     f"{arr.dtype}")


def check_scales(scales, shape, mode, operand, transposed, field):
    """The scales as a flat float32 array, checked: their count for `mode` and
    the operand, each finite and > 0. ValueError naming `field`."""
    s = np.asarray(scales)
    if s.dtype.kind not in "fiu":
        raise ValueError(f"{field}: scales must be float32 numbers, got {s.dtype}")
    s = np.ascontiguousarray(s, dtype=np.float32).reshape(-1)
    need = scale_count(shape, mode, operand, transposed)
    if s.size != need:
        raise ValueError(f"{field}: {mode} scales of operand {operand} with a "
                         f"{shape[0]} x {shape[1]} matrix{' (transposed)' if transposed else ''}"
                         f" need {need} values, got {s.size}")
    bad = np.flatnonzero(~(np.isfinite(s) & (s > 0)))
    if bad.size:
        raise ValueError(f"{field}: scale {bad[0]} is {s[bad[0]]!r}; scales must be finite "
                         "and > 0")
    return s


def quantize(x, format="e4m3", mode="tensor", operand="a",  # pylint: disable=redefined-builtin
             transposed=False):
    """Quantizes a float32, float16 or bf16 (uint16 bits) matrix by the
    server's rule (common/fp8.h) into an Fp8Matrix: codes in x's layout
    (C- or Fortran-ordered as x is) and scales laid out for `operand` ("a" or
    "b") of problems that transpose it or not. `format`, `mode`, `operand`
    and `transposed` may also come as one Fp8Quantization in `format`.
    ValueError for a NaN or infinity (naming its index) or a bad argument.
    Block scales take any K (a partial last block along K)."""
    if isinstance(format, Fp8Quantization):
        q = format.checked()
    else:
        q = Fp8Quantization(format, mode, operand, transposed).checked("")
    values = _float32_source(x, "x")
    finite = np.isfinite(values)
    if not finite.all():
        i, j = np.argwhere(~finite)[0]
        raise ValueError(f"x: element ({i}, {j}) is {values[i, j]!r}; only finite values "
                         "can be quantized")
    scales = scale_for_amax(_amax(values, q.mode, q.operand, q.transposed), q.format)
    grid = _per_element(scales, values.shape, q.mode, q.operand, q.transposed)
    quotient = values.astype(np.float64) / grid.astype(np.float64)
    codes = encode(quotient, q.format)
    if np.isfortran(values) and not values.flags.c_contiguous:
        codes = np.asfortranarray(codes)
    return Fp8Matrix(codes, scales, q.format, q.mode)


def dequantize(matrix, operand="a", transposed=False):
    """An Fp8Matrix's real values (code x scale, float32), its scales read as
    `operand`'s ("a" or "b") of problems that transpose it or not."""
    fmt = fp8_format(matrix.format, "format")
    mode = scale_mode(matrix.mode)
    role = operand_role(operand)
    codes = _uint8(matrix.codes, "codes")
    s = check_scales(matrix.scales, codes.shape, mode, role, transposed, "scales")
    return _TABLES[fmt][codes] * _per_element(s, codes.shape, mode, role, transposed)


@dataclasses.dataclass(frozen=True)
class Precision:
    """What an input of an FP8 problem ran as (gemm.v1 OperandPrecision):
    its element type, its scale mode ("tensor", "channel", "block", or "none"
    for an input that was not FP8), and whether the server quantized it (on
    register or by quantize_partner)."""

    dtype: DType
    scale_mode: str
    quantized_by_server: bool

    @classmethod
    def from_proto(cls, p):
        return cls(DType.from_proto(p.dtype), scale_mode_name(p.scale_mode),
                   bool(p.quantized_by_server))


class GemmResult(np.ndarray):
    """The result of an FP8 problem: a numpy array with `a_precision` and
    `b_precision` (Precision) beside it. Other problems give plain arrays."""

    a_precision = None
    b_precision = None

    def __array_finalize__(self, obj):
        self.a_precision = getattr(obj, "a_precision", None)
        self.b_precision = getattr(obj, "b_precision", None)


def with_precision(array, a_precision, b_precision):
    """`array` as a GemmResult carrying the precision records (serialized
    gemm.v1.OperandPrecision bytes, or None for a non-FP8 problem)."""
    if a_precision is None and b_precision is None:
        return array
    out = array.view(GemmResult)
    out.a_precision = (Precision.from_proto(gemm_pb2.OperandPrecision.FromString(
        bytes(a_precision))) if a_precision is not None else None)
    out.b_precision = (Precision.from_proto(gemm_pb2.OperandPrecision.FromString(
        bytes(b_precision))) if b_precision is not None else None)
    return out

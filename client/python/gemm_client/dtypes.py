"""Element types on the wire and their numpy forms.

float32 and float16 arrays travel as they are. numpy has no bfloat16 (and
ml_dtypes is not packaged for Debian 12), so bf16 matrices are numpy uint16
arrays holding the bf16 bit patterns: the upper 16 bits of the float32 of the
same value. `to_bf16` and `from_bf16` convert; a uint16 operand is always read
as bf16, and a bf16 result comes back as uint16.

FP8 matrices (inputs only) are numpy uint8 arrays of codes, named by their
format (FP8_E4M3, FP8_E5M2) since the array alone cannot say which; they
travel as an fp8.Fp8Matrix with their scales, never as a bare uint8 array.
"""

import enum

import numpy as np

from gemm.v1 import gemm_pb2


class DType(enum.Enum):
    """An element type: its wire enum, its numpy storage type and its size."""

    FP32 = (gemm_pb2.DATA_TYPE_FP32, np.dtype("<f4"))
    FP16 = (gemm_pb2.DATA_TYPE_FP16, np.dtype("<f2"))
    BF16 = (gemm_pb2.DATA_TYPE_BF16, np.dtype("<u2"))
    FP8_E4M3 = (gemm_pb2.DATA_TYPE_FP8_E4M3, np.dtype("u1"))
    FP8_E5M2 = (gemm_pb2.DATA_TYPE_FP8_E5M2, np.dtype("u1"))

    @property
    def proto(self):
        return self.value[0]

    @property
    def numpy(self):
        """The little-endian numpy dtype the bytes are stored as."""
        return self.value[1]

    @property
    def is_fp8(self):
        return self in (DType.FP8_E4M3, DType.FP8_E5M2)

    @property
    def itemsize(self):
        return self.value[1].itemsize

    @classmethod
    def from_proto(cls, value):
        for d in cls:
            if d.proto == value:
                return d
        raise ValueError(f"unknown gemm.v1.DataType {value}")

    @classmethod
    def of(cls, spec, field="dtype"):
        """The DType that `spec` names: a DType, "fp32"/"fp16"/"bf16"/"e4m3"/
        "e5m2" (any case), a numpy dtype or scalar type (uint16 meaning bf16;
        uint8 names no type, as it could hold either FP8 format). ValueError
        naming `field` otherwise."""
        if isinstance(spec, DType):
            return spec
        if isinstance(spec, str) and spec.lower() in _NAMES:
            return _NAMES[spec.lower()]
        try:
            kind = np.dtype(spec)
        except TypeError:
            kind = None
        if kind is not None:
            for d in cls:
                if not d.is_fp8 and kind.newbyteorder("<") == d.numpy:
                    return d
        raise ValueError(
            f"{field}: {spec!r} is not a supported element type "
            "(float32, float16, bf16 as a uint16 view, or an FP8 format by name)")


_NAMES = {"fp32": DType.FP32, "float32": DType.FP32, "fp16": DType.FP16,
          "float16": DType.FP16, "bf16": DType.BF16, "bfloat16": DType.BF16,
          "e4m3": DType.FP8_E4M3, "fp8_e4m3": DType.FP8_E4M3,
          "e5m2": DType.FP8_E5M2, "fp8_e5m2": DType.FP8_E5M2}

BF16 = DType.BF16


def to_bf16(values):
    """float32 (or anything numpy casts to it) -> bf16 bits as uint16, rounding to
    nearest with ties to even. NaN stays NaN (quiet); infinities stay."""
    x = np.asarray(values, dtype=np.float32)
    bits = x.view(np.uint32)
    # Adding 0x7fff plus the lowest kept bit rounds half to even in integer
    # arithmetic; NaNs are set apart first so that rounding cannot carry one
    # into an infinity.
    rounded = bits + (np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1)))
    out = (rounded >> np.uint32(16)).astype(np.uint16)
    nan = np.isnan(x)
    if nan.any():
        out[nan] = ((bits[nan] >> np.uint32(16)) | np.uint32(0x0040)).astype(np.uint16)
    return out


def from_bf16(bits):
    """bf16 bits (uint16) -> float32, exactly."""
    b = np.asarray(bits)
    if b.dtype.newbyteorder("<") != np.dtype("<u2"):
        raise ValueError(f"bf16 bits must be uint16, got {b.dtype}")
    return (b.astype(np.uint32) << np.uint32(16)).view(np.float32)


def to_float64(array, dtype):
    """A matrix of `dtype` (bf16 as its uint16 bits) as float64, for checks."""
    if DType.of(dtype) is DType.BF16:
        return from_bf16(array).astype(np.float64)
    return np.asarray(array, dtype=np.float64)

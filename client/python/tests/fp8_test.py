"""The client's FP8 codec and quantization rule (gemm_client.fp8) without a
server: every code of both formats decoded against a bit-field reference,
encoding against a brute-force nearest search with ties to even, the rule's
scales (zero and tiny groups, saturation, non-finite input), the scale
layout and count of every mode for A and B, transposed or not, and the
checks a problem's FP8 operands get before anything is sent. That the codes
equal the server's (common/fp8.cc) bit for bit is checked against the real
server in fp8_server_test."""

import fractions
import itertools
import math
import unittest

import numpy as np

from gemm.v1 import gemm_pb2

import gemm_client
from gemm_client import DType, Fp8Matrix, InvalidArgumentError, fp8, problems

FORMATS = ("e4m3", "e5m2")
MODES = ("tensor", "channel", "block")


def reference_decode(code, fmt):
    """The value of `code` from its bit fields, in Python floats."""
    mantissa_bits, bias = (3, 7) if fmt == "e4m3" else (2, 15)
    exp_bits = 7 - mantissa_bits
    sign = -1.0 if code & 0x80 else 1.0
    exp = (code >> mantissa_bits) & ((1 << exp_bits) - 1)
    man = code & ((1 << mantissa_bits) - 1)
    if fmt == "e4m3" and exp == 15 and man == 7:
        return math.nan
    if fmt == "e5m2" and exp == 31:
        return sign * math.inf if man == 0 else math.nan
    if exp == 0:
        return sign * man * 2.0 ** (1 - bias - mantissa_bits)
    return sign * (1 + man / 2 ** mantissa_bits) * 2.0 ** (exp - bias)


def reference_encode(x, fmt):
    """The nearest finite code to float `x` (ties to the even code),
    saturating: a search over every finite code in exact arithmetic."""
    best = None
    exact = fractions.Fraction(x)
    for code in range(256):
        v = reference_decode(code, fmt)
        if not math.isfinite(v) or (v == 0 and code & 0x80):
            continue
        d = abs(fractions.Fraction(v) - exact)
        if best is None or d < best[0] or (d == best[0] and code % 2 == 0):
            best = (d, code)
    code = best[1]
    if x < 0 and code != 0:
        code |= 0x80
    elif x < 0 or (x == 0 and math.copysign(1, x) < 0):
        code = 0x80
    return code


class CodecTest(unittest.TestCase):

    def test_every_code_decodes_as_its_bit_fields(self):
        for fmt in FORMATS:
            got = gemm_client.fp8.decode_codes(np.arange(256, dtype=np.uint8), fmt)
            self.assertEqual(got.dtype, np.float32)
            for code in range(256):
                want = reference_decode(code, fmt)
                if math.isnan(want):
                    self.assertTrue(np.isnan(got[code]), f"{fmt} {code:#x}")
                else:
                    self.assertEqual(float(got[code]), want, f"{fmt} {code:#x}")
        self.assertEqual(fp8.fp8_max("e4m3"), 448.0)
        self.assertEqual(fp8.fp8_max("e5m2"), 57344.0)

    def test_every_finite_code_round_trips(self):
        for fmt in FORMATS:
            table = gemm_client.fp8.decode_codes(np.arange(256, dtype=np.uint8), fmt)
            finite = np.flatnonzero(np.isfinite(table))
            got = fp8.encode(table[finite].astype(np.float64), fmt)
            np.testing.assert_array_equal(got, finite.astype(np.uint8), fmt)

    def test_midpoints_round_to_even_and_neighbours_to_nearest(self):
        for fmt in FORMATS:
            table = gemm_client.fp8.decode_codes(np.arange(128, dtype=np.uint8), fmt)
            finite = [c for c in range(128) if np.isfinite(table[c])]
            for lo, hi in zip(finite, finite[1:]):
                mid = (float(table[lo]) + float(table[hi])) / 2
                even = lo if lo % 2 == 0 else hi
                below, above = np.nextafter(mid, -np.inf), np.nextafter(mid, np.inf)
                got = fp8.encode(np.array([mid, below, above, -mid]), fmt)
                self.assertEqual(list(got), [even, lo, hi, even | 0x80], f"{fmt} {lo:#x}")

    def test_random_values_match_a_brute_force_search(self):
        rng = np.random.default_rng(3)
        for fmt in FORMATS:
            top = fp8.fp8_max(fmt)
            values = np.concatenate([
                rng.uniform(-1.2 * top, 1.2 * top, 300),
                rng.standard_normal(300) * 2.0 ** rng.integers(-24, 4, 300),
                [0.0, -0.0, 1e-300, -1e-300, 5e-324]])
            got = fp8.encode(values, fmt)
            want = [reference_encode(float(v), fmt) for v in values]
            self.assertEqual(list(got), want, fmt)

    def test_saturation_and_non_finite(self):
        self.assertEqual(list(fp8.encode([1e6, -1e6, np.inf, -np.inf], "e4m3")),
                         [0x7E, 0xFE, 0x7E, 0xFE])
        self.assertEqual(list(fp8.encode([1e9, -np.inf], "e5m2")), [0x7B, 0xFB])
        self.assertEqual(fp8.encode([np.nan], "e4m3")[0] & 0x7F, 0x7F)
        self.assertEqual(fp8.encode([np.nan], "e5m2")[0] & 0x7F, 0x7E)
        # Just below half the smallest subnormal goes to zero; just above, to it.
        tiny = 2.0 ** -10  # half of e4m3's smallest subnormal 2^-9
        self.assertEqual(list(fp8.encode([tiny, np.nextafter(tiny, 1)], "e4m3")), [0, 1])


class QuantizeTest(unittest.TestCase):

    def setUp(self):
        self.rng = np.random.default_rng(11)

    def test_scales_follow_the_rule(self):
        x = np.array([[0.0, 0.0], [3.0, -448.0 * 7]], np.float32)
        m = gemm_client.quantize_fp8(x, "e4m3", "channel", "a")
        self.assertEqual(m.scales.dtype, np.float32)
        self.assertEqual(list(m.scales), [1.0, np.float32(448.0 * 7) / np.float32(448.0)])
        self.assertEqual(list(m.codes[0]), [0, 0])
        self.assertEqual(m.codes[1, 1], 0xFE)  # -amax is exactly -FMT_MAX
        # A tiny group's scale never underflows to zero.
        tiny = np.full((1, 4), np.float32(1e-45), np.float32)
        m = gemm_client.quantize_fp8(tiny, "e5m2")
        self.assertEqual(m.scales[0], np.finfo(np.float32).smallest_subnormal)
        self.assertTrue(np.all(np.isfinite(gemm_client.dequantize_fp8(m))))
        self.assertTrue(np.all(m.codes == m.codes[0, 0]))

    def test_non_finite_input_is_refused(self):
        for bad in (np.nan, np.inf, -np.inf):
            x = np.ones((3, 4), np.float32)
            x[2, 1] = bad
            with self.assertRaisesRegex(ValueError, r"x: element \(2, 1\)"):
                gemm_client.quantize_fp8(x)

    def test_bad_arguments_are_named(self):
        x = np.ones((4, 100), np.float32)
        with self.assertRaisesRegex(ValueError, "format"):
            gemm_client.quantize_fp8(x, "e3m4")
        with self.assertRaisesRegex(ValueError, "mode"):
            gemm_client.quantize_fp8(x, "e4m3", "row")
        with self.assertRaisesRegex(ValueError, "operand"):
            gemm_client.quantize_fp8(x, "e4m3", "tensor", "c")
        # Block scales take any K: K = 100 is one partial block per row.
        self.assertEqual(gemm_client.quantize_fp8(x, "e4m3", "block", "a").scales.size, 4)
        with self.assertRaisesRegex(ValueError, "x: quantizes"):
            gemm_client.quantize_fp8(x.astype(np.float64))

    def test_every_mode_layout_and_count(self):
        # Stored 200 x K (or its transpose), K whole blocks or ragged (a
        # partial last block along K): every group's amax sits at a known
        # element, so each scale's position is checked, not only its count.
        for fmt, mode, role, transposed, k in itertools.product(FORMATS, MODES, "ab",
                                                                (False, True), (256, 1000, 129)):
            outer = 200
            kb = -(-k // 128)
            x = self.rng.uniform(-1, 1, (outer, k)).astype(np.float32)  # op coordinates
            o, kk = np.meshgrid(np.arange(outer), np.arange(k), indexing="ij")
            if mode == "tensor":
                group, count = np.zeros_like(o), 1
            elif mode == "channel":
                group, count = o, outer
            elif role == "a":
                group, count = o * kb + kk // 128, outer * kb
            else:
                ob = -(-outer // 128)
                group, count = (kk // 128) * ob + o // 128, kb * ob
            amax = np.arange(1, count + 1, dtype=np.float32) * 2.0
            x = np.clip(x, -1, 1)
            for g in range(count):
                where = np.argwhere(group == g)[0]
                x[tuple(where)] = -amax[g]
            # Stored: A is M x K (K x M transposed); B is K x N (N x K transposed).
            stored = x if (role == "a") != transposed else x.T
            for order in ("C", "F"):
                arr = np.asarray(stored, order=order)
                m = gemm_client.quantize_fp8(arr, fmt, mode, role, transposed)
                what = f"{fmt} {mode} {role} transposed={transposed} K={k} {order}"
                self.assertEqual(m.scales.size, count, what)
                self.assertEqual(m.scales.size, fp8.scale_count(arr.shape, mode, role,
                                                                transposed), what)
                want = fp8.scale_for_amax(amax, fmt)
                np.testing.assert_array_equal(m.scales, want, what)
                self.assertEqual(m.codes.flags.f_contiguous and not m.codes.flags.c_contiguous,
                                 order == "F", what)
                back = gemm_client.dequantize_fp8(m, role, transposed)
                self.assertLessEqual(float(np.max(np.abs(back - arr) / amax.max())), 0.07, what)
                # Each group's amax element is exactly -FMT_MAX * scale.
                self.assertTrue(np.all(np.isin(np.uint8(0xFE if fmt == "e4m3" else 0xFB),
                                               m.codes)), what)

    def test_bf16_and_float16_sources(self):
        x = self.rng.uniform(-3, 3, (8, 128)).astype(np.float32)
        bits = gemm_client.to_bf16(x)
        from_bits = gemm_client.quantize_fp8(bits, "e5m2", "block", "a")
        from_float = gemm_client.quantize_fp8(gemm_client.from_bf16(bits), "e5m2", "block", "a")
        np.testing.assert_array_equal(from_bits.codes, from_float.codes)
        np.testing.assert_array_equal(from_bits.scales, from_float.scales)
        half = x.astype(np.float16)
        np.testing.assert_array_equal(gemm_client.quantize_fp8(half).codes,
                                      gemm_client.quantize_fp8(half.astype(np.float32)).codes)

    def test_quotient_rounds_once(self):
        # The code comes from the exact quotient x / scale (float64 holds it
        # closely enough): find x whose float32 quotient lands exactly on the
        # midpoint 1.0625 between e4m3's 1 and 1.125 while the exact one is
        # above it, so a float32 division would round to 1 (ties to even).
        rng = np.random.default_rng(2)
        for _ in range(10000):
            amax = np.float32(rng.uniform(448, 896))
            scale = np.float32(amax / np.float32(448))
            base = np.float32(np.float32(1.0625) * scale)
            for x in (base, np.nextafter(base, np.float32(0)), np.nextafter(base, np.float32(9))):
                if (np.float32(x / scale) == np.float32(1.0625) and
                        np.float64(x) / np.float64(scale) > 1.0625):
                    m = gemm_client.quantize_fp8(np.array([[amax, x]], np.float32))
                    self.assertEqual(m.scales[0], scale)
                    self.assertEqual(m.codes[0, 1], 0x39)  # 1.125, not 1.0 (0x38)
                    return
        self.fail("no float32 double-rounding case found")


class ProblemCheckTest(unittest.TestCase):
    """prepare() refuses bad FP8 problems before sending, naming the field."""

    def setUp(self):
        rng = np.random.default_rng(5)
        self.a = gemm_client.quantize_fp8(rng.standard_normal((4, 128)).astype(np.float32))
        self.b = gemm_client.quantize_fp8(rng.standard_normal((128, 3)).astype(np.float32),
                                          "e5m2", "channel", "b")

    def prepare(self, **kw):
        p = dict(a=self.a, b=self.b)
        p.update(kw)
        return problems.prepare(problems.Problem(**p))

    def test_mixed_formats_set_b_dtype_and_default_fp32_output(self):
        prepared = self.prepare()
        self.assertEqual(prepared.proto.input_dtype, gemm_pb2.DATA_TYPE_FP8_E4M3)
        self.assertEqual(prepared.proto.b_dtype, gemm_pb2.DATA_TYPE_FP8_E5M2)
        self.assertEqual(prepared.out_dtype, DType.FP32)
        self.assertEqual(prepared.operands["b"].scales_proto().mode, gemm_pb2.SCALE_MODE_CHANNEL)
        self.assertEqual(len(prepared.operands["b"].scales_proto().data), 12)
        self.assertFalse(self.prepare(b=self.a.__class__(self.b.codes, self.b.scales, "e4m3",
                                                         "channel")).proto.HasField("b_dtype"))

    def assert_refused(self, pattern, **kw):
        with self.assertRaisesRegex(InvalidArgumentError, pattern) as cm:
            self.prepare(**kw)
        self.assertIsInstance(cm.exception, ValueError)

    def test_bad_operands_are_named(self):
        self.assert_refused(r"b\.scales: channel scales .* need 3 values, got 4",
                            b=Fp8Matrix(self.b.codes, np.ones(4, np.float32), "e5m2", "channel"))
        self.assert_refused(r"a\.scales: scale 0 is 0\.0",
                            a=Fp8Matrix(self.a.codes, [0.0], "e4m3"))
        self.assert_refused(r"a\.scales: scale 0 is -1\.0",
                            a=Fp8Matrix(self.a.codes, [-1.0], "e4m3"))
        self.assert_refused(r"a\.scales: scale 0 is nan",
                            a=Fp8Matrix(self.a.codes, [np.nan], "e4m3"))
        self.assert_refused(r"a\.codes: FP8 codes must be a uint8 array",
                            a=Fp8Matrix(self.a.codes.astype(np.int8), [1.0], "e4m3"))
        self.assert_refused(r"a\.format", a=Fp8Matrix(self.a.codes, [1.0], "fp16"))
        self.assert_refused(r"a\.mode", a=Fp8Matrix(self.a.codes, [1.0], "e4m3", "rows"))
        self.assert_refused(r"out_dtype: FP8 outputs", out_dtype="e4m3")
        self.assert_refused(r"^INVALID_ARGUMENT: a: a uint8 array", a=self.a.codes)
        self.assert_refused(r"quantize_partner: a is FP32",
                            a=np.ones((4, 128), np.float32))
        self.assert_refused(r"b: a partner quantized by the server must be float32 or bf16",
                            b=np.ones((128, 3), np.float16), quantize_partner=True)
        self.assert_refused(r"quantize_partner: a and b are both FP8", quantize_partner=True)
        # Block scales with K = 100: one partial block along K; the count of
        # whole blocks (none) is refused.
        self.assertEqual(self.prepare(a=Fp8Matrix(np.zeros((4, 100), np.uint8), np.ones(4),
                                                  "e4m3", "block"),
                                      b=Fp8Matrix(np.zeros((100, 3), np.uint8), [1.0],
                                                  "e4m3")).proto.k, 100)
        self.assert_refused(r"a\.scales: block scales .* need 4 values, got 0",
                            a=Fp8Matrix(np.zeros((4, 100), np.uint8), np.ones(0), "e4m3",
                                        "block"),
                            b=Fp8Matrix(np.zeros((100, 3), np.uint8), [1.0], "e4m3"))

    def test_transposed_operands_count_scales_in_op_coordinates(self):
        # A stored K x M with transpose_a: channel scales are M = 5 of them.
        a = Fp8Matrix(np.zeros((128, 5), np.uint8), np.ones(5, np.float32), "e4m3", "channel")
        prepared = self.prepare(a=a, transpose_a=True)
        self.assertEqual((prepared.proto.m, prepared.proto.k), (5, 128))
        self.assert_refused(r"a\.scales: .* need 128 values, got 5", a=a,
                            b=Fp8Matrix(np.zeros((5, 3), np.uint8), [1.0], "e4m3"))
        # B stored N x K with transpose_b, block: (K/128) x ceil(N/128) = 2 x 2.
        b = Fp8Matrix(np.zeros((130, 256), np.uint8), np.ones(4, np.float32), "e4m3", "block")
        a = Fp8Matrix(np.zeros((3, 256), np.uint8), np.ones(6, np.float32), "e4m3", "block")
        self.assertEqual(self.prepare(a=a, b=b, transpose_b=True).proto.n, 130)

    def test_partner_quantization_and_non_fp8_flag(self):
        prepared = self.prepare(b=gemm_client.to_bf16(np.ones((128, 3), np.float32)),
                                quantize_partner=True, out_dtype="bf16")
        self.assertTrue(prepared.proto.quantize_partner)
        self.assertEqual(prepared.proto.b_dtype, gemm_pb2.DATA_TYPE_BF16)
        with self.assertRaisesRegex(InvalidArgumentError, "quantize_partner: needs one FP8"):
            problems.prepare(problems.Problem(np.ones((2, 2), np.float32),
                                              np.ones((2, 2), np.float32),
                                              quantize_partner=True))

    def test_precision_record_on_the_result(self):
        rec = gemm_pb2.OperandPrecision(dtype=gemm_pb2.DATA_TYPE_FP8_E5M2,
                                        scale_mode=gemm_pb2.SCALE_MODE_BLOCK,
                                        quantized_by_server=True).SerializeToString()
        out = fp8.with_precision(np.zeros((2, 2), np.float32), rec, None)
        self.assertIsInstance(out, gemm_client.GemmResult)
        self.assertEqual(out.a_precision, gemm_client.Precision(DType.FP8_E5M2, "block", True))
        self.assertIsNone(out.b_precision)
        self.assertIs(type(fp8.with_precision(np.zeros(1), None, None)), np.ndarray)


if __name__ == "__main__":
    unittest.main()

"""FP8 through gemm_client against the real gemm_server (CPU backend, which
runs FP8 by dequantizing each operand and running sgemm): every format pair
and scale mode, transposes and layouts, results checked against float64 of
the dequantized operands; quantize on register (whole and chunked) giving
the client's codes bit for bit; quantize_partner; the precision record; the
chunked path for FP8 operands; errors naming the field; asyncio."""

import asyncio
import itertools
import unittest

import grpc
import numpy as np

import gemm_client
from gemm_client import DType, Fp8Matrix, Fp8Quantization, GemmError, Precision

import server_process

SERVER = None
PAIRS = (("e4m3", "e4m3"), ("e4m3", "e5m2"), ("e5m2", "e4m3"))
MODES = ("tensor", "channel", "block")
TOL = 1e-5  # fp32 sgemm of exactly dequantized operands


def stored(rng, rows, cols, order="C"):
    x = rng.standard_normal((rows, cols)).astype(np.float32) * 3
    return np.asfortranarray(x) if order == "F" else x


def dequantized(m, role, transposed):
    """op(X) of an Fp8Matrix in float64."""
    x = gemm_client.dequantize_fp8(m, role, transposed).astype(np.float64)
    return x.T if transposed else x


def relative_error(out, ref):
    out = np.asarray(out, np.float64)
    return float(np.linalg.norm(out - ref) / np.linalg.norm(ref))


class Fp8ServerTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.server = server_process.ServerProcess(SERVER, "--max_dimension=4096")
        cls.server.__enter__()
        cls.client = gemm_client.Client(cls.server.target, timeout=30)

    @classmethod
    def tearDownClass(cls):
        cls.client.close()
        cls.server.__exit__()

    def setUp(self):
        self.rng = np.random.default_rng(17)

    def check(self, d, ref, what):
        err = relative_error(d, ref)
        self.assertLessEqual(err, TOL, f"{what}: relative error {err}")

    def operands(self, m, n, k, fa, fb, mode_a, mode_b, ta=False, tb=False, oa="C", ob="C"):
        a = gemm_client.quantize_fp8(stored(self.rng, *((k, m) if ta else (m, k)), oa),
                                     fa, mode_a, "a", ta)
        b = gemm_client.quantize_fp8(stored(self.rng, *((n, k) if tb else (k, n)), ob),
                                     fb, mode_b, "b", tb)
        return a, b, dequantized(a, "a", ta) @ dequantized(b, "b", tb)

    def test_every_format_pair_and_scale_mode(self):
        m, n, k = 37, 150, 256  # N past one 128-wide block of B
        for (fa, fb), mode in itertools.product(PAIRS, MODES):
            what = f"{fa} x {fb} {mode}"
            a, b, ref = self.operands(m, n, k, fa, fb, mode, mode)
            d = self.client.matmul(a, b)
            self.assertEqual((d.shape, d.dtype), ((m, n), np.float32), what)
            self.check(d, ref, what)
            self.assertEqual(d.a_precision, Precision(DType.of(fa), mode, False), what)
            self.assertEqual(d.b_precision, Precision(DType.of(fb), mode, False), what)

    def test_block_scales_with_ragged_k(self):
        # K % 128 != 0: ceil(K/128) blocks along K, the last one partial, on
        # both operands and beside channel and tensor scales; transposed too.
        for k, (mode_a, mode_b), (ta, tb) in itertools.product(
                (1, 129, 1000), (("block", "block"), ("block", "channel"), ("tensor", "block")),
                ((False, False), (True, True))):
            what = f"K={k} {mode_a}/{mode_b} transposed={ta}"
            a, b, ref = self.operands(19, 150, k, "e4m3", "e5m2", mode_a, mode_b, ta, tb)
            d = self.client.matmul(a, b, transpose_a=ta, transpose_b=tb)
            self.check(d, ref, what)
        # Quantized on register with a ragged K: the server's codes and
        # scales are the client's.
        x = stored(self.rng, 1000, 24, "C")
        q = Fp8Quantization("e4m3", "block", "b")
        with self.client.register(x, quantize=q) as w:
            a, _, _ = self.operands(5, 24, 1000, "e5m2", "e4m3", "block", "block")
            local = gemm_client.quantize_fp8(x, q)
            np.testing.assert_array_equal(w.to_numpy(), local.codes)
            self.assertEqual(w.nbytes, x.size + 4 * 8)  # 8 x 1 blocks
            d = self.client.matmul(a, w)
            self.check(d, dequantized(a, "a", False) @ dequantized(local, "b", False),
                       "registered K=1000")

    def test_transposes_layouts_mixed_modes_and_outputs(self):
        m, n, k = 19, 131, 128
        for (ta, tb, oa, ob), (mode_a, mode_b) in itertools.product(
                itertools.product((False, True), (False, True), "CF", "CF"),
                (("block", "channel"), ("tensor", "block"), ("channel", "tensor"))):
            what = f"a:{oa}{'T' if ta else ''} {mode_a} b:{ob}{'T' if tb else ''} {mode_b}"
            a, b, ref = self.operands(m, n, k, "e4m3", "e5m2", mode_a, mode_b, ta, tb, oa, ob)
            d = self.client.matmul(a, b, transpose_a=ta, transpose_b=tb)
            self.check(d, ref, what)
        a, b, ref = self.operands(8, 8, 128, "e5m2", "e4m3", "block", "block")
        c = self.rng.standard_normal((8, 8)).astype(np.float32)
        d = self.client.matmul(a, b, c=gemm_client.to_bf16(c), alpha=0.5, beta=2.0,
                               out_dtype="bf16")
        self.assertEqual(d.dtype, np.uint16)
        ref = 0.5 * ref + 2.0 * gemm_client.from_bf16(gemm_client.to_bf16(c))
        self.assertLessEqual(relative_error(gemm_client.from_bf16(d), ref), 1e-2)
        d = self.client.matmul(a, b, out_dtype=np.float16)
        self.assertEqual(d.dtype, np.float16)
        self.assertLessEqual(relative_error(d, 0.0 + dequantized(a, "a", False) @
                                            dequantized(b, "b", False)), 5e-3)

    def test_matmul_many_and_the_chunked_path(self):
        a, b, ref = self.operands(64, 96, 256, "e4m3", "e4m3", "block", "channel")
        a2, b2, ref2 = self.operands(5, 7, 128, "e5m2", "e4m3", "tensor", "tensor")
        d, d2 = self.client.matmul_many([(a, b), {"a": a2, "b": b2}])
        self.check(d, ref, "first")
        self.check(d2, ref2, "second")
        # Operands over the threshold go as transient uploads named by handle,
        # their scales still in the request; the result comes back in chunks.
        with gemm_client.Client(self.server.target, timeout=30,
                                chunked_threshold_bytes=4096) as chunked:
            d = chunked.matmul(a, b)
            self.check(d, ref, "chunked")
            self.assertEqual(d.b_precision, Precision(DType.FP8_E4M3, "channel", False))

    def test_quantize_on_register_matches_the_client_bit_for_bit(self):
        for fmt, mode, role, transposed, order in itertools.product(
                ("e4m3", "e5m2"), MODES, "ab", (False, True), "CF"):
            what = f"{fmt} {mode} {role} transposed={transposed} {order}"
            outer_is_row = (role == "a") != transposed  # stored M x K or N x K
            x = stored(self.rng, *((130, 256) if outer_is_row else (256, 130)), order)
            x *= np.float32(1e-3)
            x[3, 5] = 0
            x[7, :] = 0  # a zero channel (or part of a block) where rows are channels
            q = Fp8Quantization(fmt, mode, role, transposed)
            with self.client.register(x, quantize=q) as resident:
                self.assertEqual(resident.dtype, DType.of(fmt), what)
                mine = gemm_client.quantize_fp8(x, q)
                np.testing.assert_array_equal(resident.to_numpy(), mine.codes, what)
                self.assertEqual(resident.nbytes, x.size + 4 * mine.scales.size, what)
                # The same product from the server's copy and from the client's.
                partner_shape = (256, 9) if outer_is_row else (9, 256)
                other_role = "b" if role == "a" else "a"
                other = gemm_client.quantize_fp8(
                    stored(self.rng, *partner_shape), "e4m3", "tensor", other_role, transposed)
                pair = (resident, other) if role == "a" else (other, resident)
                pair_mine = (mine, other) if role == "a" else (other, mine)
                kw = {"transpose_a": transposed, "transpose_b": transposed}
                d = self.client.matmul(*pair, **kw)
                np.testing.assert_allclose(d, self.client.matmul(*pair_mine, **kw), rtol=1e-6,
                                           atol=1e-6 * float(np.abs(d).max()), err_msg=what)
                record = d.a_precision if role == "a" else d.b_precision
                self.assertEqual(record, Precision(DType.of(fmt), mode, True), what)

    def test_quantize_on_chunked_register_and_bf16(self):
        x = gemm_client.to_bf16(stored(self.rng, 256, 300))
        q = Fp8Quantization("e5m2", "block", "b")
        with gemm_client.Client(self.server.target, timeout=30,
                                chunked_threshold_bytes=4096) as chunked:
            with chunked.register(x, quantize=q) as resident:
                self.assertEqual(resident.dtype, DType.FP8_E5M2)
                mine = gemm_client.quantize_fp8(x, q)
                np.testing.assert_array_equal(resident.to_numpy(), mine.codes)

    def test_registered_fp8_codes_with_scales_per_problem(self):
        a, b, ref = self.operands(24, 40, 256, "e4m3", "e5m2", "block", "channel", tb=True)
        with self.client.register(b) as b_codes:
            self.assertEqual((b_codes.dtype, b_codes.shape), (DType.FP8_E5M2, (40, 256)))
            np.testing.assert_array_equal(b_codes.to_numpy(), b.codes)
            d = self.client.matmul(a, Fp8Matrix(b_codes, b.scales, "e5m2", "channel"),
                                   transpose_b=True)
            self.check(d, ref, "registered codes")
            self.assertEqual(d.b_precision, Precision(DType.FP8_E5M2, "channel", False))
            # The server needs the scales of codes it did not quantize.
            with self.assertRaises(GemmError) as cm:
                self.client.matmul(a, b_codes, transpose_b=True)
            self.assertEqual(cm.exception.code, grpc.StatusCode.INVALID_ARGUMENT)
            self.assertIn("scales", cm.exception.message)
            with self.assertRaisesRegex(ValueError, r"b\.codes: the resident matrix holds"):
                self.client.matmul(a, Fp8Matrix(b_codes, b.scales, "e4m3", "channel"),
                                   transpose_b=True)
            with self.assertRaisesRegex(ValueError, r"b\.scales: .* need 40 values"):
                self.client.matmul(a, Fp8Matrix(b_codes, b.scales[:4], "e5m2", "channel"),
                                   transpose_b=True)
        with self.assertRaisesRegex(ValueError, "quantize: the matrix is FP8 already"):
            self.client.register(b, quantize=Fp8Quantization())

    def test_quantize_partner(self):
        m, n, k = 40, 140, 256
        for fmt, mode, partner_dtype in itertools.product(("e4m3", "e5m2"), MODES,
                                                          (DType.FP32, DType.BF16)):
            what = f"{fmt} {mode} partner {partner_dtype.name}"
            a = gemm_client.quantize_fp8(stored(self.rng, m, k), fmt, mode, "a")
            b = stored(self.rng, n, k)  # given as N x K and transposed
            if partner_dtype is DType.BF16:
                b = gemm_client.to_bf16(b)
            d = self.client.matmul(a, b, transpose_b=True, quantize_partner=True)
            # The server quantizes B as operand B of this problem by A's rule.
            b_q = gemm_client.quantize_fp8(b, fmt, mode, "b", True)
            self.check(d, dequantized(a, "a", False) @ dequantized(b_q, "b", True), what)
            self.assertEqual(d.a_precision, Precision(DType.of(fmt), mode, False), what)
            self.assertEqual(d.b_precision, Precision(DType.of(fmt), mode, True), what)
        # The partner may be A, and resident.
        b = gemm_client.quantize_fp8(stored(self.rng, k, n), "e4m3", "channel", "b")
        a = stored(self.rng, m, k)
        with self.client.register(a) as a_dev:
            d = self.client.matmul(a_dev, b, quantize_partner=True)
        a_q = gemm_client.quantize_fp8(a, "e4m3", "channel", "a")
        self.check(d, dequantized(a_q, "a", False) @ dequantized(b, "b", False), "a partner")
        self.assertTrue(d.a_precision.quantized_by_server)

    def test_non_fp8_results_stay_plain_arrays(self):
        d = self.client.matmul(np.ones((2, 3), np.float32), np.ones((3, 2), np.float32))
        self.assertIs(type(d), np.ndarray)

    def test_bad_input_is_refused_naming_the_field(self):
        a, b, _ = self.operands(4, 4, 128, "e4m3", "e4m3", "channel", "channel")
        cases = [
            (dict(a=Fp8Matrix(a.codes, a.scales[:3], "e4m3", "channel"), b=b), r"a\.scales"),
            (dict(a=a, b=Fp8Matrix(b.codes, np.full(4, np.inf), "e4m3", "channel")),
             r"b\.scales: scale 0 is inf"),
            (dict(a=a, b=b, out_dtype="e5m2"), "out_dtype"),
            (dict(a=a, b=b.codes), "b: a uint8 array"),
            (dict(a=a, b=np.ones((128, 4), np.float32)), "quantize_partner"),
        ]
        for kw, pattern in cases:
            with self.assertRaisesRegex(ValueError, pattern):
                self.client.matmul(**kw)
        with self.assertRaisesRegex(ValueError, "matrix: quantize applies to float32 or bf16"):
            self.client.register(np.ones((4, 4), np.float16), quantize=Fp8Quantization())
        with self.assertRaisesRegex(ValueError, r"quantize\.mode"):
            self.client.register(np.ones((4, 4), np.float32),
                                 quantize=Fp8Quantization("e4m3", "rows"))
        # The server's own refusal of non-finite data, named by field.
        x = np.ones((4, 4), np.float32)
        x[1, 1] = np.nan
        with self.assertRaises(GemmError) as cm:
            self.client.register(x, quantize=Fp8Quantization())
        self.assertEqual(cm.exception.code, grpc.StatusCode.INVALID_ARGUMENT)
        self.assertIn("data", cm.exception.message)
        with self.assertRaises(GemmError) as cm:
            self.client.matmul(gemm_client.quantize_fp8(np.ones((4, 128), np.float32)),
                               np.where(np.eye(128, 4) > 0, np.nan, 1).astype(np.float32),
                               quantize_partner=True)
        self.assertEqual(cm.exception.code, grpc.StatusCode.INVALID_ARGUMENT)
        self.assertIn("b.data", cm.exception.message)

    def test_async_client(self):
        a, b, ref = self.operands(9, 10, 128, "e5m2", "e4m3", "block", "block")
        x = stored(self.rng, 128, 10)

        async def run():
            async with gemm_client.AsyncClient(self.server.target, timeout=30) as client:
                d = await client.matmul(a, b)
                resident = await client.register(x, quantize=Fp8Quantization("e4m3", "channel",
                                                                             "b"))
                async with resident:
                    d2 = await client.matmul(a, resident)
                return d, d2

        d, d2 = asyncio.run(run())
        self.check(d, ref, "async")
        self.assertEqual(d.a_precision, Precision(DType.FP8_E5M2, "block", False))
        x_q = gemm_client.quantize_fp8(x, "e4m3", "channel", "b")
        self.check(d2, dequantized(a, "a", False) @ dequantized(x_q, "b", False), "async resident")
        self.assertTrue(d2.b_precision.quantized_by_server)


if __name__ == "__main__":
    SERVER = server_process.server_binary()
    unittest.main()

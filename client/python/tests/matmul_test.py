"""gemm_client.Client and AsyncClient against the real gemm_server (CPU
backend) on loopback: every input/output type pair, C- and Fortran-ordered
operands, transposes, alpha/beta with C, tf32, matmul_many, resident
matrices, deadlines, and errors that name the field. Results are checked
against numpy in float64 with the C++ tests' tolerances
(common/reference_gemm.cc)."""

import asyncio
import itertools
import unittest

import grpc
import numpy as np

import gemm_client
from gemm_client import BF16, DType, GemmError
from gemm_client.dtypes import to_float64

import server_process

SERVER = None
TYPES = (DType.FP32, DType.FP16, DType.BF16)


def tolerance(input_dtype, output_dtype, tf32=False):
    tol = 1e-5
    if input_dtype is DType.FP32 and tf32:
        tol = 2e-3
    if DType.FP16 in (input_dtype, output_dtype):
        tol = max(tol, 5e-3)
    if DType.BF16 in (input_dtype, output_dtype):
        tol = max(tol, 2e-2)
    return tol


def random_matrix(rng, rows, cols, dtype, order="C"):
    """Values in [-1, 1) of `dtype` (bf16 as uint16 bits) in `order`."""
    x = rng.uniform(-1.0, 1.0, size=(rows, cols)).astype(np.float32)
    x = gemm_client.to_bf16(x) if dtype is DType.BF16 else x.astype(dtype.numpy)
    return np.asfortranarray(x) if order == "F" else np.ascontiguousarray(x)


def relative_error(out, ref):
    out = np.asarray(out, np.float64)
    if not np.all(np.isfinite(out)):
        return float("inf")
    return float(np.linalg.norm(out - ref) / np.linalg.norm(ref))


def reference(a, b, dtype, transpose_a=False, transpose_b=False, c=None, out_dtype=None,
              alpha=1.0, beta=0.0):
    a64, b64 = to_float64(a, dtype), to_float64(b, dtype)
    ref = alpha * ((a64.T if transpose_a else a64) @ (b64.T if transpose_b else b64))
    if c is not None:
        ref += beta * to_float64(c, out_dtype or dtype)
    return ref


class MatmulTest(unittest.TestCase):

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
        self.rng = np.random.default_rng(7)

    def check(self, out, ref, in_dtype, out_dtype, tf32=False, what=""):
        tol = tolerance(in_dtype, out_dtype, tf32)
        err = relative_error(to_float64(out, out_dtype), ref)
        self.assertLessEqual(err, tol, f"{what}: relative error {err} > {tol}")

    def test_every_type_pair_layout_and_transpose(self):
        m, n, k = 33, 17, 29
        for in_t, out_t in itertools.product(TYPES, TYPES):
            for order_a, order_b, ta, tb in itertools.product("CF", "CF", (False, True),
                                                              (False, True)):
                what = f"{in_t.name}->{out_t.name} a:{order_a}{'T' if ta else ''} " \
                       f"b:{order_b}{'T' if tb else ''}"
                a = random_matrix(self.rng, *((k, m) if ta else (m, k)), in_t, order_a)
                b = random_matrix(self.rng, *((n, k) if tb else (k, n)), in_t, order_b)
                d = self.client.matmul(a, b, transpose_a=ta, transpose_b=tb, out_dtype=out_t)
                self.assertEqual(d.shape, (m, n), what)
                self.assertEqual(d.dtype, out_t.numpy, what)
                self.check(d, reference(a, b, in_t, ta, tb), in_t, out_t, what=what)

    def test_transposed_views_are_sent_without_copy_in_their_layout(self):
        x = random_matrix(self.rng, 40, 24, DType.FP32)
        y = random_matrix(self.rng, 40, 16, DType.FP32)
        # x.T is Fortran-ordered: it travels as column-major, as it lies.
        d = self.client.matmul(x.T, y)
        self.check(d, to_float64(x, DType.FP32).T @ to_float64(y, DType.FP32), DType.FP32,
                   DType.FP32)
        # A strided view (every other row) is made contiguous first.
        d = self.client.matmul(x[::2], y[:24])
        self.check(d, to_float64(x[::2], DType.FP32) @ to_float64(y[:24], DType.FP32),
                   DType.FP32, DType.FP32)

    def test_alpha_beta_and_c_in_either_layout(self):
        for in_t, out_t, order_c in itertools.product(TYPES, (DType.FP32, DType.BF16), "CF"):
            a = random_matrix(self.rng, 20, 12, in_t)
            b = random_matrix(self.rng, 12, 9, in_t)
            c = random_matrix(self.rng, 20, 9, out_t, order_c)
            d = self.client.matmul(a, b, c=c, alpha=0.5, beta=-2.0, out_dtype=out_t)
            # The result comes back in C's layout.
            self.assertEqual(d.flags.f_contiguous and not d.flags.c_contiguous, order_c == "F")
            self.check(d, reference(a, b, in_t, c=c, out_dtype=out_t, alpha=0.5, beta=-2.0),
                       in_t, out_t, what=f"{in_t.name}->{out_t.name} c:{order_c}")

    def test_tf32(self):
        a = random_matrix(self.rng, 64, 48, DType.FP32)
        b = random_matrix(self.rng, 48, 32, DType.FP32)
        d = self.client.matmul(a, b, allow_tf32=True)
        self.check(d, reference(a, b, DType.FP32), DType.FP32, DType.FP32, tf32=True)

    def test_bf16_by_name_and_float16_scalar_types(self):
        a = random_matrix(self.rng, 8, 8, DType.FP16)
        d = self.client.matmul(a, a, out_dtype="bf16")
        self.assertEqual(d.dtype, np.uint16)
        d2 = self.client.matmul(a, a, out_dtype=np.float32)
        self.assertEqual(d2.dtype, np.float32)
        self.check(d, to_float64(d2, DType.FP32), DType.FP16, BF16)

    def test_matmul_many_mixed_shapes_and_types(self):
        problems = []
        for i in range(6):
            t = TYPES[i % 3]
            m, n, k = 5 + i, 7 + 2 * i, 3 + 3 * i
            problems.append(gemm_client.Problem(random_matrix(self.rng, m, k, t),
                                                random_matrix(self.rng, k, n, t)))
        problems.append((random_matrix(self.rng, 4, 4, DType.FP32),
                         random_matrix(self.rng, 4, 4, DType.FP32)))
        problems.append(dict(a=random_matrix(self.rng, 6, 3, DType.FP32),
                             b=random_matrix(self.rng, 6, 3, DType.FP32), transpose_b=True))
        results = self.client.matmul_many(problems)
        self.assertEqual(len(results), len(problems))
        for p, d in zip(problems[:6], results):
            t = DType.of(p.a.dtype)
            self.check(d, reference(p.a, p.b, t), t, t)
        self.check(results[7], reference(problems[7]["a"], problems[7]["b"], DType.FP32,
                                         transpose_b=True), DType.FP32, DType.FP32)

    def test_resident_matrices(self):
        w = random_matrix(self.rng, 32, 16, DType.BF16, "F")
        x = random_matrix(self.rng, 8, 32, DType.BF16)
        with self.client.register(w, label="weights") as w_dev:
            self.assertEqual(w_dev.shape, (32, 16))
            self.assertEqual(w_dev.order, "F")
            self.assertGreaterEqual(w_dev.nbytes, w.nbytes)
            np.testing.assert_array_equal(w_dev.to_numpy(), w)
            d = self.client.matmul(x, w_dev, out_dtype=DType.FP32)
            self.check(d, reference(x, w, DType.BF16), DType.BF16, DType.FP32)
            handle = w_dev.handle
        with self.assertRaises(GemmError) as e:
            self.client.matmul(x, w_dev)
        self.assertEqual(e.exception.code, grpc.StatusCode.NOT_FOUND, e.exception)
        with self.assertRaises(GemmError) as e:
            self.client.release(handle)
        self.assertEqual(e.exception.code, grpc.StatusCode.NOT_FOUND)

    def test_errors_name_the_field(self):
        a = np.ones((4, 5), np.float32)
        cases = [
            (lambda: self.client.matmul(a, np.ones((6, 3), np.float32)), "b:"),
            (lambda: self.client.matmul(np.ones((2, 2, 2), np.float32), a), "a:"),
            (lambda: self.client.matmul(a.astype(np.float64), a.T), "a:"),
            (lambda: self.client.matmul(a, a.T.astype(np.float16)), "b:"),
            (lambda: self.client.matmul(a, a.T, beta=1.0), "c:"),
            (lambda: self.client.matmul(a, a.T, c=np.ones((3, 3), np.float32), beta=1.0), "c:"),
            (lambda: self.client.matmul(a, a.T, out_dtype=np.int8), "out_dtype:"),
            (lambda: self.client.matmul(a.astype(np.float16), a.T.astype(np.float16),
                                        allow_tf32=True), "allow_tf32:"),
            (lambda: self.client.matmul_many([(a, a.T), (a, a)]), "problems[1].b:"),
            (lambda: self.client.matmul_many([]), "problems:"),
        ]
        for call, field in cases:
            with self.assertRaises(GemmError) as e:
                call()
            self.assertEqual(e.exception.code, grpc.StatusCode.INVALID_ARGUMENT, field)
            self.assertIn(field, e.exception.message)
        # Refused by the server (over its --max_dimension), which names the field.
        with self.assertRaises(GemmError) as e:
            self.client.matmul(np.ones((1, 5000), np.float32), np.ones((5000, 1), np.float32))
        self.assertEqual(e.exception.code, grpc.StatusCode.INVALID_ARGUMENT)
        self.assertIn("problems[0].k", e.exception.message)
        self.assertIn("problems[0].k", str(e.exception))

    def test_deadline(self):
        a = random_matrix(self.rng, 512, 512, DType.FP32)
        with self.assertRaises(GemmError) as e:
            self.client.matmul(a, a, timeout=1e-4)
        self.assertEqual(e.exception.code, grpc.StatusCode.DEADLINE_EXCEEDED)

    def test_deterministic_is_forwarded_or_refused(self):
        a = random_matrix(self.rng, 16, 16, DType.FP32)
        if gemm_client.supports_deterministic():
            first = self.client.matmul(a, a, deterministic=True)
            np.testing.assert_array_equal(first, self.client.matmul(a, a, deterministic=True))
        else:
            with self.assertRaises(GemmError) as e:
                self.client.matmul(a, a, deterministic=True)
            self.assertEqual(e.exception.code, grpc.StatusCode.UNIMPLEMENTED)
            self.assertIn("deterministic", e.exception.message)
        # Unset, it is not sent at all.
        self.check(self.client.matmul(a, a), reference(a, a, DType.FP32), DType.FP32, DType.FP32)

    def test_server_info(self):
        info = self.client.server_info()
        self.assertEqual(info.backend, "cpu")
        self.assertEqual(info.limits.max_dimension, 4096)
        self.assertEqual(len(info.instance_id), 16)

    def test_asyncio(self):
        rng = self.rng
        target = self.server.target

        async def main():
            async with gemm_client.AsyncClient(target) as client:
                pairs = [(random_matrix(rng, 24, 16, t), random_matrix(rng, 16, 8, t, "F"))
                         for t in TYPES for _ in range(6)]
                results = await asyncio.gather(*[client.matmul(a, b, out_dtype=DType.FP32)
                                                 for a, b in pairs])
                for (a, b), d in zip(pairs, results):
                    t = DType.of(a.dtype)
                    self.check(d, reference(a, b, t), t, DType.FP32)
                many = await client.matmul_many([pairs[0], pairs[1]])
                self.assertEqual(len(many), 2)
                w = random_matrix(rng, 16, 8, DType.FP16)
                async with await client.register(w) as w_dev:
                    np.testing.assert_array_equal(await w_dev.to_numpy(), w)
                    d = await client.matmul(pairs[6][0], w_dev)
                    self.check(d, reference(pairs[6][0], w, DType.FP16), DType.FP16,
                               DType.FP16)
                with self.assertRaises(GemmError) as e:
                    await client.matmul(pairs[0][0], pairs[0][0])
                self.assertEqual(e.exception.code, grpc.StatusCode.INVALID_ARGUMENT)
                info = await client.server_info()
                self.assertEqual(info.backend, "cpu")

        asyncio.run(main())


if __name__ == "__main__":
    SERVER = server_process.server_binary()
    unittest.main()

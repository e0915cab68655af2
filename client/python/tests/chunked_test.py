"""Operands and results that travel in chunks (gemm.v1.Transfer), striped
over several connections, against the real gemm_server started with a small
--max_message_bytes (256 KiB) so that modest matrices exceed one message:
requests over the server's message limit, operands over the client's
chunked_threshold_bytes, results kept and downloaded, resident matrices
uploaded in chunks, and the same through AsyncClient."""

import asyncio
import unittest

import numpy as np

import gemm_client
from gemm_client import DType

import server_process

SERVER = None
MAX_MESSAGE = 256 << 10


def rand(rng, rows, cols, dtype=np.float32, order="C"):
    x = rng.uniform(-1, 1, size=(rows, cols)).astype(np.float32)
    x = gemm_client.to_bf16(x) if dtype == "bf16" else x.astype(dtype)
    return np.asfortranarray(x) if order == "F" else x


def f64(x):
    return gemm_client.from_bf16(x).astype(np.float64) if x.dtype == np.uint16 else \
        x.astype(np.float64)


def rel(out, ref):
    return np.linalg.norm(f64(out) - ref) / np.linalg.norm(ref)


class ChunkedTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.server = server_process.ServerProcess(
            SERVER, f"--max_message_bytes={MAX_MESSAGE}",
            f"--max_receive_buffer_bytes={64 * MAX_MESSAGE}")
        cls.server.__enter__()

    @classmethod
    def tearDownClass(cls):
        cls.server.__exit__()

    def setUp(self):
        self.rng = np.random.default_rng(11)

    def test_over_the_servers_message_limit(self):
        # Default client settings: the server's 256 KiB limit is what makes
        # these 600 KB operands and the 1.4 MB result go in chunks.
        with gemm_client.Client(self.server.target) as client:
            info = client.server_info()
            self.assertEqual(info.limits.max_message_bytes, MAX_MESSAGE)
            a = rand(self.rng, 600, 250)
            b = rand(self.rng, 250, 600, order="F")
            d = client.matmul(a, b)
            self.assertEqual(d.shape, (600, 600))
            self.assertLess(rel(d, f64(a) @ f64(b)), 1e-5)

    def test_over_the_clients_threshold_every_type(self):
        with gemm_client.Client(self.server.target, chunked_threshold_bytes=32 << 10,
                                chunk_bytes=8 << 10, transfer_channels=3) as client:
            for dtype, tol in ((np.float32, 1e-5), (np.float16, 5e-3), ("bf16", 2e-2)):
                a = rand(self.rng, 130, 170, dtype, "F")
                b = rand(self.rng, 170, 90, dtype)
                c = rand(self.rng, 130, 90, np.float32, "F")
                d = client.matmul(a, b, c=c, beta=0.5, out_dtype=np.float32)
                self.assertTrue(d.flags.f_contiguous)
                self.assertLess(rel(d, f64(a) @ f64(b) + 0.5 * f64(c)), tol, dtype)
            # Several problems of one request, each operand uploaded at once.
            problems = [(rand(self.rng, 100, 120), rand(self.rng, 120, 110)) for _ in range(3)]
            for (a, b), d in zip(problems, client.matmul_many(problems)):
                self.assertLess(rel(d, f64(a) @ f64(b)), 1e-5)

    def test_odd_sizes_and_one_channel(self):
        with gemm_client.Client(self.server.target, chunked_threshold_bytes=1,
                                chunk_bytes=999, transfer_channels=1) as client:
            a = rand(self.rng, 37, 41)
            b = rand(self.rng, 41, 3)
            self.assertLess(rel(client.matmul(a, b), f64(a) @ f64(b)), 1e-5)

    def test_resident_matrix_uploaded_and_downloaded_in_chunks(self):
        with gemm_client.Client(self.server.target) as client:
            w = rand(self.rng, 700, 300, np.float16, "F")  # 420 KB > one message
            with client.register(w) as w_dev:
                np.testing.assert_array_equal(w_dev.to_numpy(), w)
                x = rand(self.rng, 50, 700, np.float16)
                d = client.matmul(x, w_dev, out_dtype=DType.FP32)
                self.assertLess(rel(d, f64(x) @ f64(w)), 5e-3)

    def test_asyncio(self):
        rng = self.rng

        async def main():
            async with gemm_client.AsyncClient(self.server.target,
                                               chunked_threshold_bytes=64 << 10) as client:
                pairs = [(rand(rng, 300, 200), rand(rng, 200, 300)) for _ in range(4)]
                results = await asyncio.gather(*[client.matmul(a, b) for a, b in pairs])
                for (a, b), d in zip(pairs, results):
                    self.assertLess(rel(d, f64(a) @ f64(b)), 1e-5)
                w = rand(rng, 400, 200, "bf16")
                async with await client.register(w) as w_dev:
                    np.testing.assert_array_equal(await w_dev.to_numpy(), w)

        asyncio.run(main())


if __name__ == "__main__":
    SERVER = server_process.server_binary()
    unittest.main()

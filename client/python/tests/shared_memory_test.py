"""Shared memory (gemm_client.SharedMemory) against the real gemm_server on
loopback: operands named in a registered region (C- and Fortran-ordered
float32, bf16, C with beta), D written into the region (out=), the
shared_memory setting against the same problems sent as bytes, arrays the
client refuses by field before sending, unregister and close, and the
fallback to bytes where the server has shared memory off."""

import asyncio
import logging
import unittest

import grpc
import numpy as np

import gemm_client
from gemm_client import shared_memory

import server_process
from arrays import f64, rand, rel

SERVER = None


def at_address(address, shape, dtype=np.float32):
    """A float32 array at a raw address (never read: the client refuses it)."""
    holder = type("Raw", (), {"__array_interface__": {
        "data": (address, False), "shape": shape, "typestr": np.dtype(dtype).str,
        "version": 3}})()
    return np.asarray(holder)


class SharedMemoryTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.server = server_process.ServerProcess(SERVER)
        cls.off = server_process.ServerProcess(SERVER, "--max_shared_memory_regions=0")
        cls.server.__enter__()
        cls.off.__enter__()

    @classmethod
    def tearDownClass(cls):
        cls.server.__exit__()
        cls.off.__exit__()

    def setUp(self):
        self.rng = np.random.default_rng(21)

    def test_region_layout(self):
        with gemm_client.SharedMemory(1 << 16) as region:
            x = region.empty((3, 5), np.float32, order="F")
            y = region.copy_in(np.arange(6, dtype=np.float16).reshape(2, 3).T)
            self.assertTrue(x.flags.f_contiguous and not x.flags.c_contiguous)
            self.assertTrue(y.flags.f_contiguous and not y.flags.c_contiguous)
            np.testing.assert_array_equal(y, np.arange(6, dtype=np.float16).reshape(2, 3).T)
            ox, oy = region.offset_of(x), region.offset_of(y)
            self.assertEqual(ox, shared_memory.align_up(shared_memory.FIRST_OFFSET))
            self.assertEqual(oy % shared_memory.ALIGNMENT, 0)
            self.assertGreaterEqual(oy, ox + x.nbytes)
            self.assertIsNone(region.offset_of(np.zeros(4)))
            with self.assertRaises(MemoryError):
                region.empty((1 << 16,), np.uint8)

    def test_operands_and_out_in_the_region(self):
        with gemm_client.Client(self.server.target) as client, \
                gemm_client.SharedMemory(8 << 20) as region:
            region_id = client.register_shared_memory(region, label="test")
            self.assertTrue(region_id)
            for dtype, order, tol in ((np.float32, "C", 1e-5), (np.float32, "F", 1e-5),
                                      ("bf16", "C", 2e-2), ("bf16", "F", 2e-2)):
                a_host = rand(self.rng, 70, 50, dtype, order)
                b_host = rand(self.rng, 50, 30, dtype, "F" if order == "C" else "C")
                a = region.copy_in(a_host)
                b = region.copy_in(b_host)
                self.assertEqual(a.flags.f_contiguous, order == "F")
                d = client.matmul(a, b)
                self.assertEqual(d.shape, (70, 30))
                self.assertLess(rel(d, f64(a_host) @ f64(b_host)), tol, (dtype, order))
                # A transposed view is named in the other layout.
                dt = client.matmul(b, a, transpose_a=True, transpose_b=True)
                self.assertLess(rel(dt, (f64(a_host) @ f64(b_host)).T), tol, (dtype, order))

            # beta with C in the region, D written into the region (F order).
            a = region.copy_in(rand(self.rng, 40, 60))
            b = region.copy_in(rand(self.rng, 60, 20))
            c = region.copy_in(rand(self.rng, 40, 20))
            out = region.empty((40, 20), np.float32, order="F")
            out[...] = 7.0
            d = client.matmul(a, b, c=c, beta=0.5, alpha=2.0, out=out)
            self.assertIs(d, out)
            ref = 2.0 * f64(a) @ f64(b) + 0.5 * f64(c)
            self.assertLess(rel(out, ref), 1e-5)
            # bf16 output into the region, and several problems in one request.
            a16 = region.copy_in(rand(self.rng, 33, 17, "bf16"))
            b16 = region.copy_in(rand(self.rng, 17, 9, "bf16"))
            out16 = region.empty((33, 9), np.uint16)
            host_a = rand(self.rng, 5, 6)
            host_b = rand(self.rng, 6, 4)
            d16, d_host = client.matmul_many([dict(a=a16, b=b16, out=out16),
                                              (host_a, host_b)])
            self.assertIs(d16, out16)
            self.assertLess(rel(out16, f64(a16) @ f64(b16)), 2e-2)
            self.assertLess(rel(d_host, f64(host_a) @ f64(host_b)), 1e-5)

            client.unregister_shared_memory(region)
            with self.assertRaises(gemm_client.InvalidArgumentError) as caught:
                client.unregister_shared_memory(region)
            self.assertEqual(caught.exception.message,
                             "region: is not registered with this client")
            # Unregistered: its arrays are plain memory again, sent as bytes.
            self.assertLess(rel(client.matmul(a, b), f64(a) @ f64(b)), 1e-5)
            with self.assertRaises(gemm_client.InvalidArgumentError) as caught:
                client.matmul(a, b, out=out)
            self.assertTrue(caught.exception.message.startswith("out: "), caught.exception)
            with self.assertRaises(gemm_client.GemmError) as caught:
                client.unregister_shared_memory(region_id)
            self.assertEqual(caught.exception.code, grpc.StatusCode.NOT_FOUND)

    def test_refused_before_sending(self):
        with gemm_client.Client(self.server.target) as client, \
                gemm_client.SharedMemory(1 << 20) as region:
            client.register_shared_memory(region)
            a = region.copy_in(rand(self.rng, 8, 6))
            b = region.copy_in(rand(self.rng, 6, 4))
            out = region.empty((8, 4), np.float32)
            first = region.view(shared_memory.FIRST_OFFSET, (1,), np.uint8).ctypes.data
            start = first - shared_memory.FIRST_OFFSET
            cases = [
                (dict(a=a[:, ::2], b=b[:3]), "a: ", "neither C- nor Fortran-contiguous"),
                (dict(a=a, b=b, out=out[:2]), "out: ", "has shape (2, 4)"),
                (dict(a=a, b=b, out=region.empty((8, 4), np.float16)), "out: ", "element type"),
                (dict(a=a, b=b, out=np.empty((8, 4), np.float32)), "out: ",
                 "shared-memory region"),
                (dict(a=a, b=b, out=region.empty((8, 4), np.float32)[:, ::-1]), "out: ",
                 "contiguous"),
                (dict(a=at_address(start + 16, (8, 6)), b=b), "a: ", "token"),
                (dict(a=a, b=at_address(start + region.nbytes - 32, (6, 4))), "b: ",
                 "past the end"),
            ]
            for kwargs, prefix, words in cases:
                with self.assertRaises(gemm_client.InvalidArgumentError) as caught:
                    client.matmul(**kwargs)
                message = caught.exception.message
                self.assertTrue(message.startswith(prefix), message)
                self.assertIn(words, message)
            with self.assertRaises(gemm_client.InvalidArgumentError) as caught:
                client.matmul_many([(a, b), dict(a=a, b=b, out=out[:2])])
            self.assertTrue(caught.exception.message.startswith("problems[1].out: "),
                            caught.exception)

    def test_closed_region_is_unusable(self):
        with gemm_client.Client(self.server.target) as client:
            region = gemm_client.SharedMemory(1 << 20)
            client.register_shared_memory(region)
            a = region.copy_in(rand(self.rng, 8, 6))
            b = region.copy_in(rand(self.rng, 6, 4))
            region.close()
            self.assertTrue(region.closed)
            with self.assertRaises(ValueError):
                region.empty((2, 2), np.float32)
            with self.assertRaises(gemm_client.InvalidArgumentError) as caught:
                client.register_shared_memory(region)
            self.assertEqual(caught.exception.message, "region: is closed")
            with self.assertRaises(gemm_client.InvalidArgumentError) as caught:
                client.matmul(a, b)
            self.assertEqual(caught.exception.message,
                             "a: its shared-memory region is closed")
            client.unregister_shared_memory(region)

    def auto_problems(self):
        return [
            dict(a=rand(self.rng, 90, 70), b=rand(self.rng, 70, 50, order="F")),
            dict(a=rand(self.rng, 40, 30, "bf16", "F"), b=rand(self.rng, 30, 20, "bf16"),
                 c=rand(self.rng, 40, 20, "bf16", "F"), beta=1.5),
            dict(a=rand(self.rng, 40, 30, np.float16), b=rand(self.rng, 20, 30, np.float16),
                 transpose_b=True, out_dtype=np.float32),
        ]

    def test_shared_memory_setting_matches_bytes(self):
        problems = self.auto_problems()
        with gemm_client.Client(self.server.target) as plain:
            expected = plain.matmul_many(problems)
        with gemm_client.Client(self.server.target, shared_memory=True) as client:
            for _ in range(2):  # the second reuses the region
                got = client.matmul_many(problems)
                self.assertEqual(len(client._auto.free), 1)
                for e, g in zip(expected, got):
                    np.testing.assert_array_equal(g, e)
                    self.assertEqual(g.flags.f_contiguous, e.flags.f_contiguous)
                    # A copy: the region is reused by the next request.
                    self.assertIsNone(client._auto.free[0][0].offset_of(g))
            # A larger request replaces the region with a larger one.
            a, b = rand(self.rng, 600, 500), rand(self.rng, 500, 600)
            self.assertLess(rel(client.matmul(a, b), f64(a) @ f64(b)), 1e-5)
            self.assertFalse(client._auto.off)
            self.assertEqual(len(client._auto.free), 1)
            self.assertGreater(client._auto.free[0][0].nbytes, 2 << 20)

    def test_shared_memory_setting_asyncio(self):
        problems = self.auto_problems()
        with gemm_client.Client(self.server.target) as plain:
            expected = [plain.matmul(**p) for p in problems]

        async def main():
            async with gemm_client.AsyncClient(self.server.target,
                                               shared_memory=True) as client:
                got = await asyncio.gather(*[client.matmul(**p) for p in problems])
                self.assertFalse(client._auto.off)
                self.assertGreaterEqual(len(client._auto.free), 1)
                region = gemm_client.SharedMemory(1 << 20)
                await client.register_shared_memory(region)
                a = region.copy_in(rand(self.rng, 8, 6))
                b = region.copy_in(rand(self.rng, 6, 4))
                out = region.empty((8, 4), np.float32)
                self.assertIs(await client.matmul(a, b, out=out), out)
                self.assertLess(rel(out, f64(a) @ f64(b)), 1e-5)
                await client.unregister_shared_memory(region)
                region.close()
                return got
        for e, g in zip(expected, asyncio.run(main())):
            np.testing.assert_array_equal(g, e)

    def test_server_with_shared_memory_off_falls_back(self):
        problems = self.auto_problems()
        with gemm_client.Client(self.server.target) as plain:
            expected = plain.matmul_many(problems)
        with gemm_client.Client(self.off.target, shared_memory=True) as client:
            with self.assertLogs("gemm_client", logging.WARNING) as logs:
                for _ in range(3):
                    for e, g in zip(expected, client.matmul_many(problems)):
                        np.testing.assert_array_equal(g, e)
            self.assertEqual(len(logs.records), 1)
            self.assertIn("FAILED_PRECONDITION", logs.output[0])
            self.assertTrue(client._auto.off)
            with self.assertRaises(gemm_client.GemmError) as caught:
                client.register_shared_memory(gemm_client.SharedMemory(4096))
            self.assertEqual(caught.exception.code, grpc.StatusCode.FAILED_PRECONDITION)

        async def main():
            async with gemm_client.AsyncClient(self.off.target, shared_memory=True) as client:
                with self.assertLogs("gemm_client", logging.WARNING):
                    got = await client.matmul_many(problems)
                self.assertTrue(client._auto.off)
                return got
        for e, g in zip(expected, asyncio.run(main())):
            np.testing.assert_array_equal(g, e)


if __name__ == "__main__":
    SERVER = server_process.server_binary()
    unittest.main()

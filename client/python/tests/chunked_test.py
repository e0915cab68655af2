"""Operands and results that travel in chunks (gemm.v1.Transfer), striped
over several connections, against the real gemm_server started with a small
--max_message_bytes (256 KiB) so that modest matrices exceed one message:
requests over the server's message limit, operands over the client's
chunked_threshold_bytes, results kept and downloaded, resident matrices
uploaded in chunks, and the same through AsyncClient; pipelined uploads
against a server that holds the Gemm for them and one that does not; kept
results released by the server as they are downloaded."""

import asyncio
import time
import unittest

import grpc
import numpy as np

import gemm_client
from gemm_client import DType

import server_process
from arrays import f64, rand, rel

SERVER = None
MAX_MESSAGE = 256 << 10


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


RESIDENT = 8 << 20


def counting_releases(client):
    """Counts the client's own ReleaseMatrix calls for the request's matrices
    (Client._release_once, AsyncClient._release_quietly): a list of handles."""
    released = []
    if isinstance(client, gemm_client.AsyncClient):
        release = client._release_quietly

        async def counted(route, handle, deadline):
            released.append(handle)
            await release(route, handle, deadline)
        client._release_quietly = counted
    else:
        release = client._release_once

        def counted(route, handle, deadline):
            released.append(handle)
            release(route, handle, deadline)
        client._release_once = counted
    return released


def slow_uploads(client, seconds=1.0):
    """Each upload stream starts `seconds` late, so that the Gemm is sure to
    reach the server while its operands are unfinished."""
    upload = client._stream_upload
    if isinstance(client, gemm_client.AsyncClient):
        async def slow(*args):
            await asyncio.sleep(seconds)
            await upload(*args)
    else:
        def slow(*args):
            time.sleep(seconds)
            upload(*args)
    client._stream_upload = slow


class PipelinedTest(unittest.TestCase):
    """Pipelined uploads (the default): the Gemm goes out while its operands
    upload and the server releases them with the request, against a server
    that holds such a request and one that refuses it (--max_waiting_requests=0).
    Both have --max_resident_bytes=8 MiB, and an 8 MiB matrix registers
    afterwards only if the request left nothing resident."""

    @classmethod
    def setUpClass(cls):
        flags = (f"--max_message_bytes={MAX_MESSAGE}",
                 f"--max_receive_buffer_bytes={64 * MAX_MESSAGE}",
                 f"--max_resident_bytes={RESIDENT}")
        cls.holding = server_process.ServerProcess(SERVER, *flags)
        cls.refusing = server_process.ServerProcess(SERVER, *flags, "--max_waiting_requests=0")
        cls.holding.__enter__()
        cls.refusing.__enter__()

    @classmethod
    def tearDownClass(cls):
        cls.holding.__exit__()
        cls.refusing.__exit__()

    def setUp(self):
        self.rng = np.random.default_rng(12)
        # 800 KB operands and a 1 MB result: over the server's message limit,
        # so uploaded, kept and downloaded in chunks: 2.6 MB resident per request.
        self.a = rand(self.rng, 512, 400)
        self.b = rand(self.rng, 400, 512, order="F")
        self.ref = f64(self.a) @ f64(self.b)

    def assert_nothing_resident(self, client):
        """A matrix of the whole max_resident_bytes registers (the memory of
        released matrices is given back as their last user lets go)."""
        self.assertEqual(client.server_info().limits.max_resident_bytes, RESIDENT)
        whole = np.zeros((RESIDENT // 4 // 1024, 1024), dtype=np.float32)
        deadline = time.monotonic() + 3
        while True:
            try:
                client.release(client.register(whole))
                return
            except gemm_client.GemmError as e:
                if (e.code != grpc.StatusCode.RESOURCE_EXHAUSTED or
                        time.monotonic() > deadline):
                    raise
            time.sleep(0.05)

    def test_nothing_resident_probe_sees_a_leftover(self):
        with gemm_client.Client(self.holding.target) as client:
            with client.register(np.zeros((8, 8), np.float32)):
                with self.assertRaises(gemm_client.GemmError) as caught:
                    client.register(np.zeros((RESIDENT // 4 // 1024, 1024), np.float32),
                                    timeout=2)
                self.assertEqual(caught.exception.code, grpc.StatusCode.RESOURCE_EXHAUSTED)
            self.assert_nothing_resident(client)

    def run_sync(self, server, expected_releases, **settings):
        with gemm_client.Client(server.target, **settings) as client:
            released = counting_releases(client)
            slow_uploads(client)
            d = client.matmul(self.a, self.b)
            self.assertEqual(d.shape, (512, 512))
            self.assertLess(rel(d, self.ref), 1e-5)
            # The operands unless the server released them; never the kept
            # result, which the server releases once downloaded
            # (release_after_download).
            self.assertEqual(len(released), expected_releases, released)
            self.assert_nothing_resident(client)

    def run_async(self, server, expected_releases, **settings):
        async def main():
            async with gemm_client.AsyncClient(server.target, **settings) as client:
                released = counting_releases(client)
                slow_uploads(client)
                results = await asyncio.gather(client.matmul(self.a, self.b),
                                               client.matmul(self.b, self.a))
                return results, released
        (ab, ba), released = asyncio.run(main())
        self.assertLess(rel(ab, self.ref), 1e-5)
        self.assertLess(rel(ba, f64(self.b) @ f64(self.a)), 1e-5)
        self.assertEqual(len(released), 2 * expected_releases, released)
        with gemm_client.Client(server.target) as client:
            self.assert_nothing_resident(client)

    def test_held_by_the_server(self):
        self.assertTrue(gemm_client.Client(self.holding.target).settings.pipelined_uploads)
        self.run_sync(self.holding, expected_releases=0)

    def test_held_by_the_server_asyncio(self):
        self.run_async(self.holding, expected_releases=0)

    def test_refused_as_unfinished_goes_again(self):
        self.run_sync(self.refusing, expected_releases=2)

    def test_refused_as_unfinished_goes_again_asyncio(self):
        self.run_async(self.refusing, expected_releases=2)

    def test_not_pipelined(self):
        self.run_sync(self.holding, expected_releases=2, pipelined_uploads=False)
        self.run_async(self.refusing, expected_releases=2, pipelined_uploads=False)

    def test_failed_upload_ends_the_held_request_at_once(self):
        with gemm_client.Client(self.holding.target) as client:
            upload = client._stream_upload
            broken = []

            def break_first(upload_call, chunks, route, deadline):
                if not broken:
                    broken.append(True)
                    time.sleep(0.3)
                    raise gemm_client.GemmError(grpc.StatusCode.DATA_LOSS, "stream broke")
                upload(upload_call, chunks, route, deadline)
            client._stream_upload = break_first
            start = time.monotonic()
            with self.assertRaises(gemm_client.GemmError) as caught:
                client.matmul(self.a, self.b, timeout=30)
            self.assertEqual(caught.exception.code, grpc.StatusCode.DATA_LOSS)
            self.assertEqual(caught.exception.message, "stream broke")
            # Released, the upload ended the held Gemm: not its 30 s deadline.
            self.assertLess(time.monotonic() - start, 10)
            self.assert_nothing_resident(client)


if __name__ == "__main__":
    SERVER = server_process.server_binary()
    unittest.main()

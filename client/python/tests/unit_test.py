"""The client's pure parts, without a server: the retry policy and pushback
parsing, bf16 rounding, the hand-written Chunk wire format (checked against
protobuf's own), stripes, target parsing, settings validation, and the
decisions of a pipelined Gemm with its calls faked."""

import asyncio
import struct
import threading
import time
import unittest

import grpc
import numpy as np

from gemm.v1 import gemm_pb2

import gemm_client
from gemm_client import RetryPolicy, chunk_wire, retry, wire
from gemm_client.client_base import Route, is_local, released_by_server
from gemm_client.errors import GemmError
from gemm_client.wire import ResultView
from gemm_client.replicas import handle_instance, split_target
from gemm_client.settings import Settings

UNAVAILABLE = grpc.StatusCode.UNAVAILABLE
EXHAUSTED = grpc.StatusCode.RESOURCE_EXHAUSTED


class RetryPolicyTest(unittest.TestCase):

    def test_backoff_grows_caps_and_jitters(self):
        p = RetryPolicy(initial_backoff=0.05, max_backoff=0.3, multiplier=2.0, jitter=0.2)
        self.assertAlmostEqual(retry.backoff_delay(p, 1, 0.5), 0.05)
        self.assertAlmostEqual(retry.backoff_delay(p, 2, 0.5), 0.1)
        self.assertAlmostEqual(retry.backoff_delay(p, 3, 0.5), 0.2)
        self.assertAlmostEqual(retry.backoff_delay(p, 4, 0.5), 0.3)
        self.assertAlmostEqual(retry.backoff_delay(p, 400, 0.5), 0.3)
        self.assertAlmostEqual(retry.backoff_delay(p, 1, 0.0), 0.04)
        self.assertAlmostEqual(retry.backoff_delay(p, 1, 1.0), 0.06)

    def test_next_retry_delay(self):
        p = RetryPolicy(max_attempts=3, jitter=0.0)
        self.assertAlmostEqual(retry.next_retry_delay(p, 1, UNAVAILABLE, None, 0, 10, 0.5), 0.05)
        self.assertEqual(retry.next_retry_delay(p, 1, EXHAUSTED, 0.7, 0, 10, 0.5), 0.7)
        self.assertIsNone(retry.next_retry_delay(p, 1, EXHAUSTED, retry.DONT_RETRY, 0, 10, 0.5))
        self.assertIsNone(retry.next_retry_delay(p, 3, UNAVAILABLE, None, 0, 10, 0.5))
        self.assertIsNone(retry.next_retry_delay(p, 1, grpc.StatusCode.INTERNAL, None, 0, 10,
                                                 0.5))
        self.assertIsNone(retry.next_retry_delay(p, 1, EXHAUSTED, 0.7, 9.5, 10, 0.5))
        self.assertEqual(retry.next_retry_delay(p, 1, EXHAUSTED, 0.7, 0, None, 0.5), 0.7)

    def test_parse_pushback(self):
        key = retry.PUSHBACK_KEY
        self.assertIsNone(retry.parse_pushback(()))
        self.assertIsNone(retry.parse_pushback((("other", "5"),)))
        self.assertEqual(retry.parse_pushback(((key, "250"),)), 0.25)
        self.assertEqual(retry.parse_pushback(((key, b" 0 "),)), 0.0)
        self.assertEqual(retry.parse_pushback(((key, "-1"),)), retry.DONT_RETRY)
        self.assertEqual(retry.parse_pushback(((key, "soon"),)), retry.DONT_RETRY)

    def test_validate_names_the_field(self):
        for bad, field in ((RetryPolicy(max_attempts=0), "retry.max_attempts"),
                           (RetryPolicy(initial_backoff=-1), "retry.initial_backoff"),
                           (RetryPolicy(max_backoff=0.01), "retry.max_backoff"),
                           (RetryPolicy(multiplier=0.5), "retry.multiplier"),
                           (RetryPolicy(jitter=2), "retry.jitter")):
            with self.assertRaisesRegex(ValueError, field):
                bad.validate()


def bf16_reference(x):
    """One float32 -> bf16 bits by hand: round half to even on the dropped bits."""
    bits = struct.unpack("<I", struct.pack("<f", x))[0]
    if x != x:
        return (bits >> 16) | 0x40
    upper, lower = bits >> 16, bits & 0xFFFF
    if lower > 0x8000 or (lower == 0x8000 and upper & 1):
        upper += 1
    return upper & 0xFFFF


class Bf16Test(unittest.TestCase):

    def test_rounds_to_nearest_even(self):
        rng = np.random.default_rng(3)
        values = np.concatenate([
            rng.standard_normal(2000).astype(np.float32),
            rng.integers(0, 2**32, 2000, dtype=np.uint64).astype(np.uint32).view(np.float32),
            np.array([0.0, -0.0, 1.0, 1.00390625, 1.01171875, 3.4028235e38, -3.4028235e38,
                      np.inf, -np.inf, np.nan, 1e-45, -1e-40], np.float32)])
        got = gemm_client.to_bf16(values)
        self.assertEqual(got.dtype, np.uint16)
        want = np.array([bf16_reference(float(v)) for v in values], np.uint16)
        nan = np.isnan(values)
        np.testing.assert_array_equal(got[~nan], want[~nan])
        self.assertTrue(np.all(np.isnan(gemm_client.from_bf16(got[nan]))))
        self.assertEqual(gemm_client.to_bf16(np.float32(1.00390625)), 0x3F80)  # tie: even
        self.assertEqual(gemm_client.to_bf16(np.float32(1.01171875)), 0x3F82)  # tie: up

    def test_round_trip_is_exact_for_bf16_values(self):
        bits = np.arange(0, 1 << 16, dtype=np.uint32).astype(np.uint16)
        f = gemm_client.from_bf16(bits)
        finite = np.isfinite(f)
        np.testing.assert_array_equal(gemm_client.to_bf16(f)[finite], bits[finite])

    def test_from_bf16_wants_uint16(self):
        with self.assertRaisesRegex(ValueError, "uint16"):
            gemm_client.from_bf16(np.zeros(3, np.float32))


class WireTest(unittest.TestCase):

    def test_encode_is_protobufs_chunk(self):
        for offset in (0, 1, 300, 1 << 40):
            data = bytes(range(256)) * 3
            raw = wire.encode_chunk(("h-1", offset, memoryview(data)))
            parsed = gemm_pb2.Chunk.FromString(raw)
            self.assertEqual((parsed.handle, parsed.offset, parsed.data), ("h-1", offset, data))

    def test_decode_reads_protobufs_chunk(self):
        for offset in (0, 7, 1 << 33):
            raw = gemm_pb2.Chunk(handle="x", offset=offset, data=b"abc" * 100).SerializeToString()
            got_offset, data = wire.decode_chunk(raw)
            self.assertEqual((got_offset, bytes(data)), (offset, b"abc" * 100))
        with self.assertRaises(ValueError):
            wire.decode_chunk(b"\x1a\x05ab")

    def test_encode_request_is_protobufs_request(self):
        base = gemm_pb2.GemmRequest(request_id="r1", priority=3, keep_results=True)
        shape = gemm_pb2.GemmProblem(m=2, n=3, k=4, input_dtype=gemm_pb2.DATA_TYPE_FP32,
                                     transpose_b=True, beta=0.5)
        a = bytes(range(32))
        c = b"\x01" * 24
        scales = gemm_pb2.Scales(mode=gemm_pb2.SCALE_MODE_CHANNEL, data=b"\0\0\x80\x3f" * 3)
        shared_c = gemm_pb2.SharedMemoryRef(region="r-1", offset=256)
        shared_out = gemm_pb2.SharedMemoryRef(region="r-1", offset=512)
        raw = wire.encode_request(base, [
            (shape, {"a": (gemm_pb2.LAYOUT_COL_MAJOR, None, memoryview(a), None, True, None),
                     "b": (gemm_pb2.LAYOUT_ROW_MAJOR, "h-b", None, scales, True, None),
                     "c": (gemm_pb2.LAYOUT_ROW_MAJOR, None, c, None, False, None)}),
            (gemm_pb2.GemmProblem(m=1, n=1, k=1, output=shared_out),
             {"a": (0, None, b"\0" * 4, None, False, None),
              "b": (0, "h-x", None, None, False, None),
              "c": (gemm_pb2.LAYOUT_COL_MAJOR, None, None, None, False, shared_c)})])
        want = gemm_pb2.GemmRequest()
        want.CopyFrom(base)
        p = want.problems.add()
        p.CopyFrom(shape)
        p.a.layout, p.a.data = gemm_pb2.LAYOUT_COL_MAJOR, a
        p.b.layout, p.b.handle = gemm_pb2.LAYOUT_ROW_MAJOR, "h-b"
        p.b.scales.CopyFrom(scales)
        p.b.release_after_use = True  # a's is dropped: it goes by data
        p.c.layout, p.c.data = gemm_pb2.LAYOUT_ROW_MAJOR, c
        q = want.problems.add(m=1, n=1, k=1, output=shared_out)
        q.a.data, q.b.handle = b"\0" * 4, "h-x"
        q.c.layout = gemm_pb2.LAYOUT_COL_MAJOR
        q.c.shared.CopyFrom(shared_c)
        self.assertEqual(gemm_pb2.GemmRequest.FromString(raw), want)

    def test_decode_response_reads_protobufs_response(self):
        response = gemm_pb2.GemmResponse(request_id="x", backend="cpu", kernel="k")
        response.timing.total_ns = 5
        response.results.add(dtype=gemm_pb2.DATA_TYPE_BF16, layout=gemm_pb2.LAYOUT_COL_MAJOR,
                             rows=2, cols=3, data=b"\x07" * 12)
        response.results.add(dtype=gemm_pb2.DATA_TYPE_FP32, rows=1, cols=1, handle="h-1")
        got = wire.decode_response(response.SerializeToString())
        self.assertEqual(len(got), 2)
        self.assertEqual((got[0].dtype, got[0].layout, got[0].rows, got[0].cols,
                          bytes(got[0].data), got[0].handle),
                         (gemm_pb2.DATA_TYPE_BF16, gemm_pb2.LAYOUT_COL_MAJOR, 2, 3,
                          b"\x07" * 12, ""))
        self.assertEqual((got[1].rows, got[1].handle, bytes(got[1].data)), (1, "h-1", b""))

    def test_stripes_are_whole_chunks_and_cover_everything(self):
        self.assertEqual(chunk_wire.stripes(0, 10, 4), [])
        self.assertEqual(chunk_wire.stripes(25, 10, 8), [(0, 10), (10, 20), (20, 25)])
        self.assertEqual(chunk_wire.stripes(100, 10, 3), [(0, 30), (30, 60), (60, 100)])
        for n, c, s in ((1, 1, 1), (12345, 100, 8), (1 << 20, 1 << 16, 8)):
            ranges = chunk_wire.stripes(n, c, s)
            self.assertEqual(ranges[0][0], 0)
            self.assertEqual(ranges[-1][1], n)
            for (b0, e0), (b1, _) in zip(ranges, ranges[1:]):
                self.assertEqual(e0, b1)
                self.assertEqual(b1 % c, 0)


class TargetTest(unittest.TestCase):

    def test_split_target(self):
        self.assertEqual(split_target("localhost:1"), (["localhost:1"], None))
        self.assertEqual(split_target("ipv4:1.2.3.4:5,6.7.8.9:5"),
                         (["ipv4:1.2.3.4:5", "ipv4:6.7.8.9:5"], None))
        self.assertEqual(split_target("dns:///gemm.svc:50051"), ([], ("gemm.svc", "50051")))
        self.assertEqual(split_target("dns:gemm"), ([], ("gemm", "443")))
        self.assertEqual(split_target(["a:1", "b:2"]), (["a:1", "b:2"], None))
        for bad in ("", [], "dns://x"):
            with self.assertRaisesRegex(ValueError, "target"):
                split_target(bad)

    def test_is_local(self):
        for address in ("127.0.0.1:5", "ipv4:127.0.0.1:5", "localhost:5", "[::1]:5",
                        "ipv6:[::1]:5", "unix:/tmp/s", "unix-abstract:x", "dns:///localhost:5"):
            self.assertTrue(is_local(address), address)
        for address in ("10.0.0.1:5", "ipv4:10.0.0.1:5", "example.com:5", "ipv6:[fe80::1]:5"):
            self.assertFalse(is_local(address), address)

    def test_handle_instance(self):
        self.assertEqual(handle_instance("0123456789abcdef-" + "f" * 32), "0123456789abcdef")
        self.assertEqual(handle_instance("not-a-handle"), "")


class SettingsTest(unittest.TestCase):

    def test_bad_settings_name_the_field(self):
        for kwargs, field in (({"timeout": 0}, "timeout"),
                              ({"chunk_bytes": 0}, "chunk_bytes"),
                              ({"transfer_channels": 0}, "transfer_channels"),
                              ({"max_message_bytes": 1 << 31}, "max_message_bytes"),
                              ({"chunked_threshold_bytes": -1}, "chunked_threshold_bytes"),
                              ({"token": "has space"}, "token"),
                              ({"root_certificates": b"x"}, "tls"),
                              ({"certificate_chain": b"x"}, "private_key")):
            with self.assertRaisesRegex(ValueError, field):
                Settings(**kwargs).validate()
        with self.assertRaisesRegex(ValueError, "replica_policy"):
            gemm_client.Client("localhost:1", replica_policy="random")

    def test_pipelined_uploads_is_on_by_default_and_a_bool(self):
        self.assertTrue(Settings().pipelined_uploads)
        with self.assertRaisesRegex(ValueError, "pipelined_uploads"):
            Settings(pipelined_uploads="no").validate()

    def test_shared_memory_is_off_by_default_and_a_bool(self):
        self.assertFalse(Settings().shared_memory)
        with self.assertRaisesRegex(ValueError, "shared_memory"):
            Settings(shared_memory=1).validate()

    def test_metadata(self):
        s = Settings(token="abc")
        self.assertEqual(s.metadata("k1"), (("authorization", "Bearer abc"),
                                            ("gemm-affinity", "k1")))
        self.assertEqual(Settings(affinity_header=False).metadata("k1"), ())


class PipelinedGemmTest(unittest.TestCase):
    """Client._gemm_while_uploading with its uploads and calls faked: the
    Gemm goes out while the uploads run; held, it is answered and the server
    has released them; refused as unfinished, it goes again after them; an
    upload's failure releases them and is what is raised."""

    def setUp(self):
        self.client = gemm_client.Client("127.0.0.1:1")
        self.route = Route(self.client._replicas.all()[0], "")
        self.events = []
        self.released = []
        self.client._release_once = lambda route, handle, deadline: self.released.append(handle)

    def tearDown(self):
        self.client.close()

    def run_request(self, answers, upload_error=None):
        """The Gemm's answers in turn (an exception is raised); the upload
        starts only once the first Gemm is out, so it cannot run before it."""
        answers = list(answers)
        gemm_sent = threading.Event()

        def upload():
            self.assertTrue(gemm_sent.wait(5), "the Gemm was not sent during the upload")
            self.events.append("uploaded")
            if upload_error is not None:
                raise upload_error

        def call(route, method, request, deadline, fail_over=False, retry=True,
                 first_attempt=1):
            self.assertFalse(fail_over)
            # The first attempt alone: a retry of a request the server took
            # would find its operands released.
            self.assertEqual(retry, bool(self.events))
            self.events.append("gemm")
            gemm_sent.set()
            answer = answers.pop(0)
            if isinstance(answer, Exception):
                raise answer
            return answer

        self.client._start_uploads = lambda *args: [self.client._pool.submit(upload)]
        self.client._call = call
        return self.client._gemm_while_uploading(
            self.route, b"request", [("h1", None), ("h2", None)], time.monotonic() + 10, None)

    def test_held(self):
        self.assertEqual(self.run_request(["results"]), ("results", True))
        self.assertEqual(self.events, ["gemm", "uploaded"])
        self.assertEqual(self.released, [])

    def test_not_held_goes_again_after_the_uploads(self):
        unfinished = GemmError(grpc.StatusCode.FAILED_PRECONDITION,
                               'problems[0].a.handle: the upload of "h1" is unfinished: '
                               '0 of 4096 bytes have arrived')
        self.assertEqual(self.run_request([unfinished, "results"]), ("results", False))
        self.assertEqual(self.events, ["gemm", "uploaded", "gemm"])
        self.assertEqual(self.released, [])  # the caller releases them

    def test_other_errors_are_raised(self):
        moved = GemmError(grpc.StatusCode.FAILED_PRECONDITION,
                          "problems[0].a.handle: belongs to another server")
        with self.assertRaises(GemmError) as caught:
            self.run_request([moved, "results"])
        self.assertIs(caught.exception, moved)
        self.assertEqual(self.events, ["gemm", "uploaded"])

    def test_refused_at_the_door_goes_again_after_the_uploads(self):
        full = GemmError(grpc.StatusCode.RESOURCE_EXHAUSTED, "max_waiting_requests: 64 wait")
        self.assertEqual(self.run_request([full, "results"]), ("results", False))
        self.assertEqual(self.events, ["gemm", "uploaded", "gemm"])
        self.assertEqual(self.client.retries, 1)

    def test_refused_once_taken_raises_the_refusal(self):
        # Taken (held), then refused when the wait ended: the server released
        # the operands, so the second attempt finds them gone.
        full = GemmError(grpc.StatusCode.RESOURCE_EXHAUSTED, "the queue is full")
        gone = GemmError(grpc.StatusCode.NOT_FOUND,
                         'problems[0].a.handle: no resident matrix has handle "h1"')
        with self.assertRaises(GemmError) as caught:
            self.run_request([full, gone])
        self.assertIs(caught.exception, full)

    def test_not_retryable_is_raised_after_the_uploads(self):
        no = GemmError(grpc.StatusCode.RESOURCE_EXHAUSTED, "max_resident_bytes",
                       trailing_metadata=(("grpc-retry-pushback-ms", "-1"),))
        with self.assertRaises(GemmError) as caught:
            self.run_request([no, "results"])
        self.assertIs(caught.exception, no)
        self.assertEqual(self.events, ["gemm", "uploaded"])

    def test_a_failed_upload_releases_the_uploads_and_is_raised(self):
        lost = GemmError(grpc.StatusCode.DATA_LOSS, "upload stream broke")
        aborted = GemmError(grpc.StatusCode.ABORTED, "the upload of \"h1\" was released")
        with self.assertRaises(GemmError) as caught:
            self.run_request([aborted], upload_error=lost)
        self.assertIs(caught.exception, lost)
        # Released by the pool thread whose upload failed, as it failed.
        deadline = time.monotonic() + 5
        while len(self.released) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        self.assertEqual(sorted(self.released), ["h1", "h2"])
        self.assertEqual(self.events, ["gemm", "uploaded"])


KEY = "gemm-release-after-download"


class FakeDownload:
    """Transfer.Download with its chunks served from `data`; each stream's
    trailers are the next of `trailers` (None: a server that ignores the
    flag). The requests are kept."""

    def __init__(self, data, trailers):
        self.data = data
        self.trailers = list(trailers)
        self.requests = []
        self.lock = threading.Lock()

    def stream(self, request):
        with self.lock:
            self.requests.append(request)
            trailers = self.trailers.pop(0)
        end = request.offset + request.length
        chunks = [(o, memoryview(self.data)[o:min(o + 5, end)])
                  for o in range(request.offset, end, 5)]
        return chunks, () if trailers is None else ((KEY, trailers),)

    def __call__(self, request, timeout=None, metadata=None):
        chunks, trailers = self.stream(request)

        class Call:
            def __iter__(self):
                return iter(chunks)

            def trailing_metadata(self):
                return trailers
        return Call()


class FakeAsyncDownload(FakeDownload):

    def __call__(self, request, timeout=None, metadata=None):
        chunks, trailers = self.stream(request)

        class Call:
            async def __aiter__(self):
                for c in chunks:
                    yield c

            async def trailing_metadata(self):
                return trailers
        return Call()


class ReleaseAfterDownloadTest(unittest.TestCase):
    """A kept result is downloaded with release_after_download, and the
    client releases it itself unless every stripe's stream says the server
    counted it (the gemm-release-after-download trailer)."""

    def setUp(self):
        self.data = bytes(range(64))
        self.limits = gemm_client.planning.Limits(1 << 20, 16, 1)

    def test_released_by_server(self):
        self.assertTrue(released_by_server([((KEY, "counted"),), ((KEY, "released"),)]))
        self.assertFalse(released_by_server([((KEY, "counted"),), (("other", "x"),)]))
        self.assertFalse(released_by_server([((KEY, "released"),), ()]))
        self.assertFalse(released_by_server([]))

    def download(self, trailers, release=True):
        fake = FakeDownload(self.data, trailers)
        with gemm_client.Client("127.0.0.1:1", transfer_channels=4) as client:
            route = Route(client._replicas.all()[0], "")
            route.replica.transfer = lambda: [(None, fake)] * 4
            flat = np.zeros(64, np.uint8)
            released = client._download_into(route, "h", flat, time.monotonic() + 10,
                                             self.limits, release=release)
        self.assertEqual(bytes(flat), self.data)
        self.assertEqual(len(fake.requests), 4)
        self.assertTrue(all(r.release_after_download == release for r in fake.requests))
        return released

    def test_download_stripes(self):
        self.assertTrue(self.download(["counted", "counted", "counted", "released"]))
        self.assertFalse(self.download(["counted", None, "counted", "released"]))
        self.assertFalse(self.download([None] * 4))
        self.assertFalse(self.download([None] * 4, release=False))

    def test_download_stripes_asyncio(self):
        async def download(trailers):
            fake = FakeAsyncDownload(self.data, trailers)
            async with gemm_client.AsyncClient("127.0.0.1:1", transfer_channels=4) as client:
                route = Route(client._replicas.all()[0], "")
                route.replica.transfer = lambda: [(None, fake)] * 4
                flat = np.zeros(64, np.uint8)
                released = await client._download_into(route, "h", flat,
                                                       time.monotonic() + 10, self.limits,
                                                       release=True)
            self.assertEqual(bytes(flat), self.data)
            self.assertTrue(all(r.release_after_download for r in fake.requests))
            return released
        self.assertTrue(asyncio.run(download(["counted", "counted", "released", "counted"])))
        self.assertFalse(asyncio.run(download(["counted", "counted", None, "counted"])))

    def test_kept_result_released_by_the_client_only_if_the_server_did_not(self):
        for server_released, expected in ((True, []), (False, ["result"])):
            with gemm_client.Client("127.0.0.1:1", chunked_threshold_bytes=1) as client:
                route = Route(client._replicas.all()[0], "")
                released = []
                uploads = iter(["up-a", "up-b"])
                client._server_limits = lambda *args: self.limits
                client._begin_upload = lambda *args: (next(uploads), 0)
                result = ResultView(dtype=gemm_pb2.DATA_TYPE_FP32, layout=gemm_pb2.LAYOUT_ROW_MAJOR,
                                    rows=2, cols=2, handle="result")
                client._gemm_while_uploading = lambda *args: ([result], True)

                def download(route_, handle, flat, deadline, limits, release=False):
                    self.assertTrue(release)
                    flat[:] = 1.0
                    return server_released
                client._download_into = download
                client._release_once = lambda route_, handle, deadline: released.append(handle)
                prepared = gemm_client.planning.prepare_all(
                    [(np.ones((2, 2), np.float32), np.ones((2, 2), np.float32))])
                out = client._gemm_on(route, prepared, gemm_pb2.GemmRequest(),
                                      time.monotonic() + 10, False)
                np.testing.assert_array_equal(out[0], np.ones((2, 2), np.float32))
                # The held uploads were released by the server with the request.
                self.assertEqual(released, expected)


if __name__ == "__main__":
    unittest.main()

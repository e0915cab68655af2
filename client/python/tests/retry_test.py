"""Retries, pushback and replicas against small fake gemm.v1 servers in this
process (grpc.server): one that answers RESOURCE_EXHAUSTED with
`grpc-retry-pushback-ms` a given number of times and then a result, one that
is UNAVAILABLE (a draining replica), and replicas that issue handles under
their own instance ids."""

import asyncio
import concurrent.futures
import threading
import time
import unittest

import grpc
import numpy as np

from gemm.v1 import gemm_pb2, gemm_pb2_grpc

import gemm_client
from gemm_client import GemmError, RetryPolicy


class FakeService(gemm_pb2_grpc.GemmServiceServicer):
    """Fails the first `failures` Gemm calls with `code` (and `pushback_ms` as
    the trailer when not None), then multiplies in float32."""

    def __init__(self, instance_id, failures=0, code=grpc.StatusCode.RESOURCE_EXHAUSTED,
                 pushback_ms=None):
        self.instance_id = instance_id
        self.failures = failures
        self.code = code
        self.pushback_ms = pushback_ms
        self.lock = threading.Lock()
        self.calls = []  # (monotonic time, metadata dict) per Gemm call
        self.registered = 0

    def Gemm(self, request, context):
        with self.lock:
            self.calls.append((time.monotonic(), dict(context.invocation_metadata())))
            fail = len(self.calls) <= self.failures
        if fail:
            if self.pushback_ms is not None:
                context.set_trailing_metadata((("grpc-retry-pushback-ms",
                                                str(self.pushback_ms)),))
            context.abort(self.code, "queue full" if self.code ==
                          grpc.StatusCode.RESOURCE_EXHAUSTED else "draining")
        response = gemm_pb2.GemmResponse(backend="fake")
        for p in request.problems:
            if p.a.handle or p.b.handle:
                # Names a handle: only its owner may be asked.
                for h in (p.a.handle, p.b.handle):
                    if h and not h.startswith(self.instance_id):
                        context.abort(grpc.StatusCode.FAILED_PRECONDITION,
                                      "handle belongs to another server")
                d = np.zeros((p.m, p.n), np.float32)
            else:
                a = np.frombuffer(p.a.data, np.float32).reshape(p.m, p.k)
                b = np.frombuffer(p.b.data, np.float32).reshape(p.k, p.n)
                d = a @ b
            response.results.add(dtype=gemm_pb2.DATA_TYPE_FP32, layout=gemm_pb2.LAYOUT_ROW_MAJOR,
                                 rows=p.m, cols=p.n, data=d.tobytes())
        return response

    def GetServerInfo(self, request, context):
        return gemm_pb2.ServerInfo(backend="fake", instance_id=self.instance_id)

    def RegisterMatrix(self, request, context):
        with self.lock:
            self.registered += 1
        return gemm_pb2.RegisterMatrixResponse(handle=f"{self.instance_id}-{'0' * 32}",
                                               bytes=len(request.data))


class FakeServer:
    def __init__(self, service):
        self.service = service
        self.server = grpc.server(concurrent.futures.ThreadPoolExecutor(max_workers=4))
        gemm_pb2_grpc.add_GemmServiceServicer_to_server(service, self.server)
        self.port = self.server.add_insecure_port("127.0.0.1:0")
        self.server.start()
        self.target = f"127.0.0.1:{self.port}"

    def stop(self):
        self.server.stop(None)


A = np.arange(6, dtype=np.float32).reshape(2, 3)
B = np.arange(12, dtype=np.float32).reshape(3, 4)


class RetryTest(unittest.TestCase):

    def serve(self, service):
        s = FakeServer(service)
        self.addCleanup(s.stop)
        return s

    def test_waits_as_long_as_the_pushback_asks_then_succeeds(self):
        service = FakeService("a" * 16, failures=2, pushback_ms=150)
        server = self.serve(service)
        with gemm_client.Client(server.target) as client:
            start = time.monotonic()
            d = client.matmul(A, B)
            elapsed = time.monotonic() - start
            np.testing.assert_array_equal(d, A @ B)
            self.assertEqual(client.retries, 2)
        self.assertEqual(len(service.calls), 3)
        gaps = [t1 - t0 for (t0, _), (t1, _) in zip(service.calls, service.calls[1:])]
        for gap in gaps:
            self.assertGreaterEqual(gap, 0.145, gaps)  # the pushback, not 50 ms backoff
        self.assertGreaterEqual(elapsed, 0.29)

    def test_negative_pushback_is_not_retried(self):
        service = FakeService("b" * 16, failures=5, pushback_ms=-1)
        server = self.serve(service)
        with gemm_client.Client(server.target) as client:
            with self.assertRaises(GemmError) as e:
                client.matmul(A, B)
        self.assertEqual(e.exception.code, grpc.StatusCode.RESOURCE_EXHAUSTED)
        self.assertEqual(e.exception.message, "queue full")
        self.assertIn(("grpc-retry-pushback-ms", "-1"), e.exception.trailing_metadata)
        self.assertEqual(len(service.calls), 1)

    def test_attempts_and_deadline_bound_the_retries(self):
        service = FakeService("c" * 16, failures=100, pushback_ms=10)
        server = self.serve(service)
        with gemm_client.Client(server.target, retry=RetryPolicy(max_attempts=3)) as client:
            with self.assertRaises(GemmError) as e:
                client.matmul(A, B)
            self.assertEqual(e.exception.code, grpc.StatusCode.RESOURCE_EXHAUSTED)
            self.assertEqual(len(service.calls), 3)
        # A pushback past the deadline ends the call at once.
        slow = FakeService("d" * 16, failures=100, pushback_ms=5000)
        server = self.serve(slow)
        with gemm_client.Client(server.target) as client:
            start = time.monotonic()
            with self.assertRaises(GemmError):
                client.matmul(A, B, timeout=1.0)
            self.assertLess(time.monotonic() - start, 0.9)
        self.assertEqual(len(slow.calls), 1)

    def test_unavailable_is_retried_with_backoff(self):
        service = FakeService("e" * 16, failures=2, code=grpc.StatusCode.UNAVAILABLE)
        server = self.serve(service)
        policy = RetryPolicy(initial_backoff=0.02, jitter=0.0)
        with gemm_client.Client(server.target, retry=policy) as client:
            np.testing.assert_array_equal(client.matmul(A, B), A @ B)
        gaps = [t1 - t0 for (t0, _), (t1, _) in zip(service.calls, service.calls[1:])]
        self.assertGreaterEqual(gaps[0], 0.019)
        self.assertGreaterEqual(gaps[1], 0.039)  # doubled

    def test_other_codes_are_not_retried(self):
        service = FakeService("f" * 16, failures=3, code=grpc.StatusCode.INVALID_ARGUMENT)
        server = self.serve(service)
        with gemm_client.Client(server.target) as client:
            with self.assertRaises(GemmError) as e:
                client.matmul(A, B)
        self.assertEqual(e.exception.code, grpc.StatusCode.INVALID_ARGUMENT)
        self.assertEqual(len(service.calls), 1)

    def test_asyncio_honours_the_pushback(self):
        service = FakeService("1" * 16, failures=1, pushback_ms=120)
        server = self.serve(service)

        async def main():
            async with gemm_client.AsyncClient(server.target) as client:
                d = await client.matmul(A, B)
                np.testing.assert_array_equal(d, A @ B)
                self.assertEqual(client.retries, 1)
        asyncio.run(main())
        self.assertGreaterEqual(service.calls[1][0] - service.calls[0][0], 0.115)

    def test_a_draining_replica_fails_over_and_handles_go_to_their_owner(self):
        draining = FakeService("2" * 16, failures=1000, code=grpc.StatusCode.UNAVAILABLE)
        healthy = FakeService("3" * 16)
        s1, s2 = self.serve(draining), self.serve(healthy)
        target = f"ipv4:{s1.target},{s2.target}"
        with gemm_client.Client(target, replica_policy="round_robin") as client:
            for _ in range(4):
                np.testing.assert_array_equal(client.matmul(A, B), A @ B)
            stats = {address: (requests, failed_over)
                     for address, _, requests, failed_over, _ in client.replicas()}
            self.assertGreaterEqual(stats[f"ipv4:{s1.target}"][1], 1)
            self.assertEqual(stats[f"ipv4:{s2.target}"][0], 4)
            # Every call carried an affinity key.
            self.assertTrue(all("gemm-affinity" in md for _, md in healthy.calls))
        # A handle is routed to the replica whose instance id starts it.
        a, b = FakeService("4" * 16), FakeService("5" * 16)
        s1, s2 = self.serve(a), self.serve(b)
        with gemm_client.Client([s1.target, s2.target]) as client:
            w = client.register(B)
            owner = a if w.handle.startswith("4") else b
            other = b if owner is a else a
            for _ in range(4):
                client.matmul(A, w)
            self.assertEqual(len(owner.calls), 4)
            self.assertEqual(len(other.calls), 0)

    def test_dns_target_resolves_to_replicas(self):
        service = FakeService("6" * 16)
        server = self.serve(service)
        with gemm_client.Client(f"dns:///localhost:{server.port}") as client:
            for _ in range(3):
                np.testing.assert_array_equal(client.matmul(A, B), A @ B)
            addresses = [address for address, *_ in client.replicas()]
        # localhost may also resolve to ::1, where nothing listens: requests
        # that went there failed over to 127.0.0.1.
        self.assertIn(f"ipv4:127.0.0.1:{server.port}", addresses)
        self.assertEqual(len(service.calls), 3)


if __name__ == "__main__":
    unittest.main()

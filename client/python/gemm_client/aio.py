"""gemm_client.AsyncClient: Client's API on asyncio (grpc.aio), every call a
coroutine. Same routing, retries, deadlines and chunked transfer as Client
(the decisions live in planning.py, replicas.py and retry.py); stripes run as
concurrent streams on the event loop instead of on threads.

    async with gemm_client.AsyncClient("localhost:50051") as client:
        d = await client.matmul(a, b)
"""

import asyncio
import itertools
import time

import grpc
import grpc.aio
import numpy as np

from gemm.v1 import gemm_pb2, gemm_pb2_grpc

from gemm_client import planning
from gemm_client.chunk_wire import chunks_of, stripes
from gemm_client.client_base import (ClientBase, check_download, decode, downloaded,
                                     released_by_server)
from gemm_client.dtypes import DType
from gemm_client.errors import GemmError
from gemm_client.problems import Problem, shaped
from gemm_client.resident import ResidentMatrix


class AsyncClient(ClientBase):
    """Client (client.py) for asyncio: the same constructor arguments. Make it
    inside a running event loop; `await close()` or use `async with`."""

    def __init__(self, target, *, tls=False, token=None, timeout=30.0, **settings):
        def make_channel(address, creds, options):
            if creds is None:
                return grpc.aio.insecure_channel(address, options=options)
            return grpc.aio.secure_channel(address, creds, options=options)

        super().__init__(target, make_channel, tls=tls, token=token, timeout=timeout,
                         **settings)

    async def close(self):
        for region, region_id in self._auto.drain():
            await self._drop_auto(region, region_id)
        for r in self._replicas.all():
            for ch in r.channels():
                await ch.close()

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc):
        await self.close()

    # Public API: as Client's.

    async def matmul(self, a, b, *, c=None, alpha=1.0, beta=0.0, transpose_a=False,
                     transpose_b=False, out_dtype=None, allow_tf32=False, quantize_partner=False,
                     out=None, deterministic=None, priority=0, timeout=None):
        """Client.matmul as a coroutine."""
        problem = Problem(a, b, c, alpha, beta, transpose_a, transpose_b, out_dtype, allow_tf32,
                          quantize_partner, out)
        results = await self.matmul_many([problem], deterministic=deterministic,
                                          priority=priority, timeout=timeout)
        return results[0]

    async def matmul_many(self, problems, *, deterministic=None, priority=0, timeout=None):
        """Client.matmul_many as a coroutine."""
        prepared = self._prepare(problems)
        base = planning.request_base(priority, deterministic)
        handles = planning.handles_of(prepared)
        deadline = self._deadline(timeout)
        return await self._run_request(
            handles, deadline, lambda route: self._gemm_on(route, prepared, base, deadline,
                                                           fail_over=not handles))

    async def server_info(self, timeout=None):
        deadline = self._deadline(timeout)

        async def body(route):
            info = await self._call(route, route.replica.stub.GetServerInfo,
                                    gemm_pb2.GetServerInfoRequest(), deadline, fail_over=True)
            route.replica.instance_id = info.instance_id
            route.replica.limits = info.limits
            return info
        return await self._run_request([], deadline, body)

    async def register(self, matrix, *, quantize=None, label=None, timeout=None):
        """Client.register as a coroutine; the ResidentMatrix works with
        `async with` and its release() is a coroutine."""
        op = self._register_operand(matrix, quantize)
        deadline = self._deadline(timeout)

        async def body(route):
            limits = await self._server_limits(route, deadline, fail_over=True)
            if self._uses_chunks(op, limits):
                handle, nbytes = await self._begin_upload(route, op, False, label, deadline,
                                                          fail_over=True)
                try:
                    await self._upload_all(route, [(handle, op)], deadline, limits)
                except GemmError:
                    await self._release_quietly(route, handle, deadline)
                    raise
            else:
                response = await self._call(route, route.replica.stub.RegisterMatrix,
                                            self._register_request(op, label), deadline,
                                            fail_over=True)
                handle, nbytes = response.handle, response.bytes
            return self._resident(route, handle, op, nbytes)
        return await self._run_request([], deadline, body)

    async def register_shared_memory(self, region, *, label=None, timeout=None):
        """Client.register_shared_memory as a coroutine."""
        request = self._shared_register_request(region, label)
        deadline = self._deadline(timeout)

        async def body(route):
            response = await self._call(route, route.replica.stub.RegisterSharedMemory,
                                        request, deadline, fail_over=True)
            self._note_shared(route, region, response.region)
            return response.region
        return await self._run_request([], deadline, body)

    async def unregister_shared_memory(self, region, *, timeout=None):
        """Client.unregister_shared_memory as a coroutine."""
        deadline = self._deadline(timeout)
        for region_id in self._shared_ids(region):
            async def body(route, region_id=region_id):
                try:
                    await self._call(route, route.replica.stub.UnregisterSharedMemory,
                                     gemm_pb2.UnregisterSharedMemoryRequest(region=region_id),
                                     deadline)
                finally:
                    self._forget_shared(region_id)
            await self._run_request([region_id], deadline, body)

    async def release(self, matrix, *, timeout=None):
        handle = matrix.handle if isinstance(matrix, ResidentMatrix) else str(matrix)
        deadline = self._deadline(timeout)

        async def body(route):
            try:
                await self._call(route, route.replica.stub.ReleaseMatrix,
                                 gemm_pb2.ReleaseMatrixRequest(handle=handle), deadline)
            finally:
                self._forget_handle(handle)
        await self._run_request([handle], deadline, body)

    async def download(self, matrix, *, timeout=None):
        deadline = self._deadline(timeout)

        async def body(route):
            limits = await self._server_limits(route, deadline)
            flat = np.empty(matrix.rows * matrix.cols, dtype=matrix.dtype.numpy)
            await self._download_into(route, matrix.handle, flat, deadline, limits)
            return shaped(flat, matrix.rows, matrix.cols, matrix.layout)
        return await self._run_request([matrix.handle], deadline, body)

    # Requests and calls.

    def _ask_instance(self, replica):
        # Routing runs synchronously; a handle from another client object on a
        # multi-replica target is resolved with a short blocking query.
        options = self._settings.channel_args(None)
        creds = self._settings.credentials()
        channel = (grpc.secure_channel(replica.address, creds, options=options) if creds
                   else grpc.insecure_channel(replica.address, options=options))
        try:
            info = gemm_pb2_grpc.GemmServiceStub(channel).GetServerInfo(
                gemm_pb2.GetServerInfoRequest(), timeout=2.0,
                metadata=self._settings.metadata())
            replica.instance_id = info.instance_id
        except grpc.RpcError:
            pass
        finally:
            channel.close()

    async def _run_request(self, handles, deadline, body):
        avoid = None
        for attempt in itertools.count(1):
            route = (self._route_for_handles(handles, self._ask_instance) if handles
                     else self._new_route(avoid))
            self._replicas.begin(route.replica)
            try:
                return await body(route)
            except GemmError as err:
                delay = self._failover_delay(err, handles, attempt, deadline, route.replica)
                if delay is None:
                    raise
            finally:
                self._replicas.end(route.replica)
            await asyncio.sleep(delay)
            avoid = route.replica

    async def _call(self, route, method, request, deadline, fail_over=False, retry=True,
                    first_attempt=1):
        fail_over = fail_over and self._replicas.usable_count(route.replica) > 0
        for attempt in itertools.count(first_attempt):
            call = method(request, timeout=self._remaining(deadline),
                          metadata=self._metadata(route),
                          wait_for_ready=self._settings.wait_for_ready)
            try:
                return await call
            except grpc.RpcError as e:
                delay = self._retry_delay(e, attempt, deadline, fail_over) if retry else None
                if delay is None:
                    raise GemmError.from_rpc_error(e) from None
            await asyncio.sleep(delay)

    async def _server_limits(self, route, deadline, fail_over=False):
        replica = route.replica
        if replica.limits is None:
            try:
                info = await self._call(route, replica.stub.GetServerInfo,
                                        gemm_pb2.GetServerInfoRequest(), deadline, fail_over)
                replica.instance_id = info.instance_id or replica.instance_id
                replica.limits = info.limits
            except GemmError as e:
                if e.code != grpc.StatusCode.UNIMPLEMENTED:
                    raise
                replica.limits = gemm_pb2.Limits()
        return self._limits(replica)

    async def _gemm_on(self, route, prepared, base, deadline, fail_over):
        need = self._auto_bytes(route, prepared)
        entry = await self._auto_region(route, need, deadline) if need else None
        if entry is None:
            return await self._gemm_prepared(route, prepared, base, deadline, fail_over)
        try:
            shared = planning.into_region(prepared, *entry)
            return await self._gemm_prepared(route, shared, base, deadline, fail_over)
        finally:
            self._auto_put(entry)

    async def _auto_region(self, route, need, deadline):
        """Client._auto_region as a coroutine."""
        entry, stale = self._auto_take(need)
        for region, region_id in stale:
            await self._drop_auto(region, region_id)
        if entry is not None:
            return entry
        region = self._auto_new(need)
        try:
            response = await self._call(route, route.replica.stub.RegisterSharedMemory,
                                        self._shared_register_request(region, "gemm_client"),
                                        deadline, retry=False)
        except GemmError as e:
            self._auto_refused(region, e)
            return None
        self._note_handle(route, response.region)
        return self._auto_registered(region, response.region)

    async def _drop_auto(self, region, region_id):
        self._auto_dropped()
        try:
            route = self._route_for_handles([region_id], self._ask_instance)
            await route.replica.stub.UnregisterSharedMemory(
                gemm_pb2.UnregisterSharedMemoryRequest(region=region_id), timeout=5.0,
                metadata=self._metadata(route))
        except (grpc.RpcError, GemmError):
            pass  # the server unmaps it when this process ends
        finally:
            self._forget_handle(region_id)
            region.close()

    async def _gemm_prepared(self, route, prepared, base, deadline, fail_over):
        limits = await self._server_limits(route, deadline, fail_over)
        plan = planning.plan(prepared, base, limits)
        release = []
        try:
            uploaded = {}
            jobs = []
            for i, name, op in plan.uploads:
                try:
                    handle, _ = await self._begin_upload(route, op, True, None, deadline,
                                                         fail_over)
                except GemmError as e:
                    field = f"problems[{i}].{name}" if len(prepared) > 1 else name
                    raise e.with_prefix(field) from None
                release.append(handle)
                uploaded[(i, name)] = handle
                jobs.append((handle, op))
            pipelined = self._settings.pipelined_uploads and bool(jobs)
            request = planning.encode(plan, prepared, uploaded, release_after_use=pipelined)
            if pipelined:
                results, held = await self._gemm_while_uploading(route, request, jobs,
                                                                 deadline, limits)
                if held:
                    release = [h for h in release if h not in uploaded.values()]
            else:
                await self._upload_all(route, jobs, deadline, limits)
                results = await self._call(route, route.replica.gemm, request, deadline,
                                            fail_over=fail_over and not jobs)
            if not plan.keep_results:
                return [decode(r, i, prepared) for i, r in enumerate(results)]
            out = []
            for r in results:
                if not r.handle:
                    raise GemmError(grpc.StatusCode.DATA_LOSS,
                                    "keep_results: a result came back without its handle")
                release.append(r.handle)
                flat = np.empty(r.rows * r.cols, dtype=DType.from_proto(r.dtype).numpy)
                if await self._download_into(route, r.handle, flat, deadline, limits,
                                             release=True):
                    release.remove(r.handle)  # the server released it
                    self._forget_handle(r.handle)
                out.append(downloaded(r, flat))
            return out
        finally:
            cleanup = max(deadline, time.monotonic() + 5.0)
            for h in release:
                await self._release_quietly(route, h, cleanup)

    async def _gemm_while_uploading(self, route, request, jobs, deadline, limits):
        """Client._gemm_while_uploading: the Gemm and the uploads run
        concurrently on the event loop; (results, held)."""
        uploading = asyncio.ensure_future(
            self._upload_or_release(route, jobs, deadline, limits))
        first = None
        try:
            results = await self._call(route, route.replica.gemm, request, deadline,
                                       retry=False)
        except GemmError as e:
            first = e
        except BaseException:
            uploading.cancel()
            raise
        await uploading
        if first is None:
            return results, True
        delay = self._pipelined_gemm_again(first, deadline)
        if delay is None:
            raise first
        await asyncio.sleep(delay)
        try:
            return await self._call(route, route.replica.gemm, request, deadline,
                                    first_attempt=1 if planning.not_held(first) else 2), False
        except GemmError as e:
            raise self._pipelined_gemm_error(first, e) from None

    async def _upload_or_release(self, route, jobs, deadline, limits):
        """The jobs' uploads; on failure they are released (a Gemm held on
        them ends then) and the upload's error raised."""
        try:
            await self._upload_all(route, jobs, deadline, limits)
        except GemmError:
            cleanup = max(deadline, time.monotonic() + 5.0)
            await asyncio.gather(*[self._release_quietly(route, h, cleanup) for h, _ in jobs])
            raise

    async def _begin_upload(self, route, op, transient, label, deadline, fail_over):
        response = await self._call(route, route.replica.stub.BeginUpload,
                                    self._begin_request(op, transient, label), deadline,
                                    fail_over)
        self._note_handle(route, response.handle)
        return response.handle, response.bytes

    async def _release_quietly(self, route, handle, deadline):
        try:
            await route.replica.stub.ReleaseMatrix(
                gemm_pb2.ReleaseMatrixRequest(handle=handle),
                timeout=self._remaining(deadline), metadata=self._metadata(route))
        except (grpc.RpcError, GemmError):
            pass  # best effort: the server frees transient matrices when idle
        finally:
            self._forget_handle(handle)

    async def _upload_all(self, route, jobs, deadline, limits):
        if not jobs:
            return
        calls = route.replica.transfer()
        streams = []
        for handle, op in jobs:
            data = op.flat_bytes()
            for begin, end in stripes(len(data), limits.chunk_bytes, len(calls)):
                upload = calls[len(streams) % len(calls)][0]
                streams.append(self._stream_upload(
                    upload, chunks_of(handle, data, begin, end, limits.chunk_bytes), route,
                    deadline))
        await _gather_all(streams)

    async def _stream_upload(self, upload, chunks, route, deadline):
        try:
            await upload(chunks, timeout=self._remaining(deadline),
                         metadata=self._metadata(route))
        except grpc.RpcError as e:
            raise GemmError.from_rpc_error(e) from None

    async def _download_into(self, route, handle, flat, deadline, limits, release=False):
        """Client._download_into as a coroutine: whether the server released
        the matrix (release_after_download)."""
        dst = memoryview(flat).cast("B")
        calls = route.replica.transfer()
        trailers = await _gather_all([
            self._stream_download(calls[i % len(calls)][1], handle, dst, begin, end, route,
                                  deadline, limits.chunk_bytes, release)
            for i, (begin, end) in enumerate(stripes(len(dst), limits.chunk_bytes, len(calls)))])
        return release and released_by_server(trailers)

    async def _stream_download(self, download, handle, dst, begin, end, route, deadline, chunk,
                               release=False):
        """One stripe; returns the stream's trailing metadata."""
        request = gemm_pb2.DownloadRequest(handle=handle, offset=begin, length=end - begin,
                                           chunk_bytes=chunk, release_after_download=release)
        pos = begin
        try:
            call = download(request, timeout=self._remaining(deadline),
                            metadata=self._metadata(route))
            async for offset, data in call:
                check_download(offset, data, pos, end, handle)
                dst[offset:offset + len(data)] = data
                pos += len(data)
            trailers = await call.trailing_metadata()
        except grpc.RpcError as e:
            raise GemmError.from_rpc_error(e) from None
        if pos != end:
            raise GemmError(grpc.StatusCode.DATA_LOSS,
                            f"download of {handle}: ended at byte {pos} of [{begin}, {end})")
        return tuple(trailers or ())


async def _gather_all(coroutines):
    """Runs all to their end (none is cancelled) and raises the first error;
    else returns their results."""
    results = await asyncio.gather(*coroutines, return_exceptions=True)
    for r in results:
        if isinstance(r, BaseException):
            raise r
    return results

"""gemm_client.Client: numpy in, numpy out, over gemm.v1 (blocking calls).

Every call has a deadline (`timeout` per call, else the client's) covering
all its attempts, and is retried on UNAVAILABLE and RESOURCE_EXHAUSTED as the
server's pushback asks, else with backoff (retry.py). Operands and results
larger than one message, or than chunked_threshold_bytes, travel in chunks
striped over several connections (planning.py). Calls may be made from many
threads at once.
"""

import concurrent.futures
import itertools
import threading
import time

import grpc
import numpy as np

from gemm.v1 import gemm_pb2

from gemm_client import planning
from gemm_client.chunk_wire import chunks_of, stripes
from gemm_client.client_base import (ClientBase, check_download, decode, downloaded,
                                     released_by_server)
from gemm_client.dtypes import DType
from gemm_client.errors import GemmError
from gemm_client.problems import Problem, shaped
from gemm_client.resident import ResidentMatrix


class Client(ClientBase):
    """A blocking client. Use as a context manager or call close().

    target: "host:port", "unix:path", "ipv4:a:p,b:p", "dns:///name:port", or a
    list of targets (replicas). tls: False, True (system roots, or
    root_certificates PEM; certificate_chain + private_key for mutual TLS), or
    grpc.ChannelCredentials. token: sent as "authorization: Bearer <token>".
    timeout: default deadline of a call, in seconds. The other keywords are
    Settings fields (settings.py), with the C++ client's defaults.
    """

    def __init__(self, target, *, tls=False, token=None, timeout=30.0, **settings):
        def make_channel(address, creds, options):
            if creds is None:
                return grpc.insecure_channel(address, options=options)
            return grpc.secure_channel(address, creds, options=options)

        super().__init__(target, make_channel, tls=tls, token=token, timeout=timeout,
                         **settings)
        self._pool = concurrent.futures.ThreadPoolExecutor(
            max_workers=4 * self._settings.transfer_channels,
            thread_name_prefix="gemm-transfer")

    def close(self):
        for region, region_id in self._auto.drain():
            self._drop_auto(region, region_id)
        self._pool.shutdown(wait=True)
        for r in self._replicas.all():
            for ch in r.channels():
                ch.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # Public API.

    def matmul(self, a, b, *, c=None, alpha=1.0, beta=0.0, transpose_a=False,
               transpose_b=False, out_dtype=None, allow_tf32=False, quantize_partner=False,
               out=None, deterministic=None, priority=0, timeout=None):
        """D = alpha * op(a) @ op(b) + beta * c as a new numpy array.

        a, b, c: 2-D float32, float16 or uint16 (bf16 bits) arrays, C- or
        Fortran-ordered (sent in that layout), or ResidentMatrix objects; a
        and b may be FP8 (Fp8Matrix: codes and scales, see fp8.py; or a
        ResidentMatrix registered with quantize), formats mixed freely.
        out_dtype: type of c and the result (None = the input type, float32
        for FP8 inputs; "bf16" or gemm_client.BF16 for bf16, returned as
        uint16). The result is row-major, or in c's layout when c is given.
        allow_tf32: fp32 inputs may run on TF32 tensor cores.
        quantize_partner: with one FP8 operand and the other float32 or bf16,
        the server quantizes the other to the FP8 one's format and scale mode.
        deterministic: ask for bitwise reproducible results (needs the API's
        GemmRequest.deterministic). The result of an FP8 problem is an
        fp8.GemmResult: an array with a_precision and b_precision (what each
        input ran as). Operands in a shared-memory region registered with
        register_shared_memory are named there, not sent; out: an M x N array
        of the output type in such a region, C- or Fortran-ordered, that the
        server writes D into (returned as the result).
        """
        problem = Problem(a, b, c, alpha, beta, transpose_a, transpose_b, out_dtype, allow_tf32,
                          quantize_partner, out)
        return self.matmul_many([problem], deterministic=deterministic, priority=priority,
                                timeout=timeout)[0]

    def matmul_many(self, problems, *, deterministic=None, priority=0, timeout=None):
        """Several problems (Problem objects, or (a, b) tuples, or dicts of
        matmul's keywords) in one request, batched or grouped on the server;
        returns their results in order."""
        prepared = self._prepare(problems)
        base = planning.request_base(priority, deterministic)
        handles = planning.handles_of(prepared)
        deadline = self._deadline(timeout)
        return self._run_request(
            handles, deadline, lambda route: self._gemm_on(route, prepared, base, deadline,
                                                           fail_over=not handles))

    def server_info(self, timeout=None):
        """gemm.v1.ServerInfo of one replica: backend, devices, peaks, limits."""
        deadline = self._deadline(timeout)

        def body(route):
            info = self._call(route, route.replica.stub.GetServerInfo,
                              gemm_pb2.GetServerInfoRequest(), deadline, fail_over=True)
            route.replica.instance_id = info.instance_id
            route.replica.limits = info.limits
            return info
        return self._run_request([], deadline, body)

    def register(self, matrix, *, quantize=None, label=None, timeout=None):
        """Stores `matrix` (an array as matmul takes) on the server and returns
        a ResidentMatrix. quantize (an Fp8Quantization) has the server keep a
        float32 or bf16 matrix as FP8 with scales by the rule of fp8.quantize,
        for the operand and transpose it names; problems then name it without
        scales. RESOURCE_EXHAUSTED past max_resident_bytes is not retried by
        the server's pushback (it sends none): release some first."""
        op = self._register_operand(matrix, quantize)
        deadline = self._deadline(timeout)

        def body(route):
            limits = self._server_limits(route, deadline, fail_over=True)
            if self._uses_chunks(op, limits):
                handle, nbytes = self._upload_matrix(route, op, False, label, deadline,
                                                     limits, fail_over=True)
            else:
                response = self._call(route, route.replica.stub.RegisterMatrix,
                                      self._register_request(op, label), deadline,
                                      fail_over=True)
                handle, nbytes = response.handle, response.bytes
            return self._resident(route, handle, op, nbytes)
        return self._run_request([], deadline, body)

    def register_shared_memory(self, region, *, label=None, timeout=None):
        """Registers a SharedMemory (shared_memory.py) with the server and
        returns its region id; from then on arrays in it are named, not
        sent. The client must be on the server's host (PERMISSION_DENIED
        otherwise; FAILED_PRECONDITION where the server has shared memory
        off; RESOURCE_EXHAUSTED over its region limits)."""
        request = self._shared_register_request(region, label)
        deadline = self._deadline(timeout)

        def body(route):
            response = self._call(route, route.replica.stub.RegisterSharedMemory, request,
                                  deadline, fail_over=True)
            self._note_shared(route, region, response.region)
            return response.region
        return self._run_request([], deadline, body)

    def unregister_shared_memory(self, region, *, timeout=None):
        """Unregisters a SharedMemory (every registration of it by this
        client) or a region id; the server unmaps it once requests using it
        end. NOT_FOUND if unknown or unregistered already."""
        deadline = self._deadline(timeout)
        for region_id in self._shared_ids(region):
            def body(route, region_id=region_id):
                try:
                    self._call(route, route.replica.stub.UnregisterSharedMemory,
                               gemm_pb2.UnregisterSharedMemoryRequest(region=region_id),
                               deadline)
                finally:
                    self._forget_shared(region_id)
            self._run_request([region_id], deadline, body)

    def release(self, matrix, *, timeout=None):
        """Frees a ResidentMatrix (or a handle string). NOT_FOUND if unknown or
        released already."""
        handle = matrix.handle if isinstance(matrix, ResidentMatrix) else str(matrix)
        deadline = self._deadline(timeout)
        self._run_request([handle], deadline,
                          lambda route: self._release_on(route, handle, deadline))

    def download(self, matrix, *, timeout=None):
        """A ResidentMatrix's contents as a new numpy array, in chunks."""
        deadline = self._deadline(timeout)

        def body(route):
            limits = self._server_limits(route, deadline)
            flat = np.empty(matrix.rows * matrix.cols, dtype=matrix.dtype.numpy)
            self._download_into(route, matrix.handle, flat, deadline, limits)
            return shaped(flat, matrix.rows, matrix.cols, matrix.layout)
        return self._run_request([matrix.handle], deadline, body)

    # Requests and calls.

    def _ask_instance(self, replica):
        try:
            info = replica.stub.GetServerInfo(
                gemm_pb2.GetServerInfoRequest(), timeout=2.0,
                metadata=self._settings.metadata())
            replica.instance_id = info.instance_id
            replica.limits = info.limits
        except grpc.RpcError:
            pass

    def _run_request(self, handles, deadline, body):
        """Runs `body(route)` on the owner of `handles`, or on a replica of the
        policy's choice; one naming no handle that fails over runs again on
        another replica."""
        avoid = None
        for attempt in itertools.count(1):
            route = (self._route_for_handles(handles, self._ask_instance) if handles
                     else self._new_route(avoid))
            self._replicas.begin(route.replica)
            try:
                return body(route)
            except GemmError as err:
                delay = self._failover_delay(err, handles, attempt, deadline, route.replica)
                if delay is None:
                    raise
            finally:
                self._replicas.end(route.replica)
            time.sleep(delay)
            avoid = route.replica

    def _call(self, route, method, request, deadline, fail_over=False, retry=True,
              first_attempt=1):
        """One unary call with retries (none unless `retry`; `first_attempt`
        counts attempts made before); GemmError on failure."""
        fail_over = fail_over and self._replicas.usable_count(route.replica) > 0
        for attempt in itertools.count(first_attempt):
            try:
                return method(request, timeout=self._remaining(deadline),
                              metadata=self._metadata(route),
                              wait_for_ready=self._settings.wait_for_ready)
            except grpc.RpcError as e:
                delay = self._retry_delay(e, attempt, deadline, fail_over) if retry else None
                if delay is None:
                    raise GemmError.from_rpc_error(e) from None
            time.sleep(delay)

    def _server_limits(self, route, deadline, fail_over=False):
        """The replica's limits (GetServerInfo, asked once), capping ours."""
        replica = route.replica
        if replica.limits is None:
            try:
                info = self._call(route, replica.stub.GetServerInfo,
                                  gemm_pb2.GetServerInfoRequest(), deadline, fail_over)
                replica.instance_id = info.instance_id or replica.instance_id
                replica.limits = info.limits
            except GemmError as e:
                if e.code != grpc.StatusCode.UNIMPLEMENTED:
                    raise
                replica.limits = gemm_pb2.Limits()  # a server without it: ours apply
        return self._limits(replica)

    def _gemm_on(self, route, prepared, base, deadline, fail_over):
        need = self._auto_bytes(route, prepared)
        entry = self._auto_region(route, need, deadline) if need else None
        if entry is None:
            return self._gemm_prepared(route, prepared, base, deadline, fail_over)
        try:
            shared = planning.into_region(prepared, *entry)
            return self._gemm_prepared(route, shared, base, deadline, fail_over)
        finally:
            self._auto_put(entry)

    def _auto_region(self, route, need, deadline):
        """A registered region of the client's own with `need` usable bytes,
        or None to send bytes."""
        entry, stale = self._auto_take(need)
        for region, region_id in stale:
            self._drop_auto(region, region_id)
        if entry is not None:
            return entry
        region = self._auto_new(need)
        try:
            response = self._call(route, route.replica.stub.RegisterSharedMemory,
                                  self._shared_register_request(region, "gemm_client"),
                                  deadline, retry=False)
        except GemmError as e:
            self._auto_refused(region, e)
            return None
        self._note_handle(route, response.region)
        return self._auto_registered(region, response.region)

    def _drop_auto(self, region, region_id):
        self._auto_dropped()
        try:
            route = self._route_for_handles([region_id], self._ask_instance)
            route.replica.stub.UnregisterSharedMemory(
                gemm_pb2.UnregisterSharedMemoryRequest(region=region_id), timeout=5.0,
                metadata=self._metadata(route))
        except (grpc.RpcError, GemmError):
            pass  # the server unmaps it when this process ends
        finally:
            self._forget_handle(region_id)
            region.close()

    def _gemm_prepared(self, route, prepared, base, deadline, fail_over):
        limits = self._server_limits(route, deadline, fail_over)
        plan = planning.plan(prepared, base, limits)
        release = []
        try:
            uploaded = {}
            jobs = []
            for i, name, op in plan.uploads:
                try:
                    handle, _ = self._begin_upload(route, op, True, None, deadline, fail_over)
                except GemmError as e:
                    field = f"problems[{i}].{name}" if len(prepared) > 1 else name
                    raise e.with_prefix(field) from None
                release.append(handle)
                uploaded[(i, name)] = handle
                jobs.append((handle, op))
            pipelined = self._settings.pipelined_uploads and bool(jobs)
            request = planning.encode(plan, prepared, uploaded, release_after_use=pipelined)
            if pipelined:
                results, held = self._gemm_while_uploading(route, request, jobs, deadline,
                                                           limits)
                if held:
                    release = [h for h in release if h not in uploaded.values()]
            else:
                self._upload_all(route, jobs, deadline, limits)
                results = self._call(route, route.replica.gemm, request, deadline,
                                      fail_over=fail_over and not jobs)
            if not plan.keep_results:
                return [decode(r, i, prepared) for i, r in enumerate(results)]
            out = []
            for r in results:
                if not r.handle:
                    raise GemmError(grpc.StatusCode.DATA_LOSS,
                                    "keep_results: a result came back without its handle")
                release.append(r.handle)
                dtype = DType.from_proto(r.dtype)
                flat = np.empty(r.rows * r.cols, dtype=dtype.numpy)
                if self._download_into(route, r.handle, flat, deadline, limits, release=True):
                    release.remove(r.handle)  # the server released it
                    self._forget_handle(r.handle)
                out.append(downloaded(r, flat))
            return out
        finally:
            # Whatever happened; the server also frees transient matrices
            # after its idle timeout if this process dies first.
            cleanup = max(deadline, time.monotonic() + 5.0)
            for h in release:
                try:
                    self._release_once(route, h, cleanup)
                except GemmError:
                    pass

    def _gemm_while_uploading(self, route, request, jobs, deadline, limits):
        """The Gemm on this thread while the jobs upload on the pool, the
        request naming them with release_after_use. Returns (results, held):
        held when the first attempt was answered, the server having released
        the uploads with it. Otherwise (a server that would not wait, or a
        retryable refusal) it is sent again once they are done, and they stay
        for the caller to release. An upload's error is raised before the
        Gemm's, and releases the uploads at once so that a held Gemm ends
        (ABORTED) then, not at its deadline."""
        first_failure = threading.Lock()
        cleanup = max(deadline, time.monotonic() + 5.0)

        def on_done(task):
            if task.cancelled() or task.exception() is None:
                return
            if not first_failure.acquire(blocking=False):
                return
            for handle, _ in jobs:
                try:
                    self._release_once(route, handle, cleanup)
                except GemmError:
                    pass  # the caller releases again at the end

        tasks = self._start_uploads(route, jobs, deadline, limits)
        for t in tasks:
            t.add_done_callback(on_done)
        first = None
        try:
            results = self._call(route, route.replica.gemm, request, deadline, retry=False)
        except GemmError as e:
            first = e
        self._wait_all(tasks)
        if first is None:
            return results, True
        delay = self._pipelined_gemm_again(first, deadline)
        if delay is None:
            raise first
        time.sleep(delay)
        try:
            return self._call(route, route.replica.gemm, request, deadline,
                              first_attempt=1 if planning.not_held(first) else 2), False
        except GemmError as e:
            raise self._pipelined_gemm_error(first, e) from None

    def _begin_upload(self, route, op, transient, label, deadline, fail_over):
        response = self._call(route, route.replica.stub.BeginUpload,
                              self._begin_request(op, transient, label), deadline, fail_over)
        self._note_handle(route, response.handle)
        return response.handle, response.bytes

    def _upload_matrix(self, route, op, transient, label, deadline, limits, fail_over):
        handle, nbytes = self._begin_upload(route, op, transient, label, deadline, fail_over)
        try:
            self._upload_all(route, [(handle, op)], deadline, limits)
        except GemmError:
            try:
                self._release_once(route, handle, deadline)
            except GemmError:
                pass  # best effort: the server frees unfinished uploads when idle
            raise
        return handle, nbytes

    def _release_on(self, route, handle, deadline):
        try:
            self._call(route, route.replica.stub.ReleaseMatrix,
                       gemm_pb2.ReleaseMatrixRequest(handle=handle), deadline)
        except GemmError as e:
            if e.code == grpc.StatusCode.NOT_FOUND:
                self._forget_handle(handle)
            raise
        self._forget_handle(handle)

    def _release_once(self, route, handle, deadline):
        try:
            route.replica.stub.ReleaseMatrix(gemm_pb2.ReleaseMatrixRequest(handle=handle),
                                             timeout=self._remaining(deadline),
                                             metadata=self._metadata(route))
        except grpc.RpcError as e:
            raise GemmError.from_rpc_error(e) from None
        finally:
            self._forget_handle(handle)

    def _upload_all(self, route, jobs, deadline, limits):
        """Every job's stripes at once over the replica's transfer channels."""
        self._wait_all(self._start_uploads(route, jobs, deadline, limits))

    def _start_uploads(self, route, jobs, deadline, limits):
        """The futures of every job's stripes, started on the pool."""
        if not jobs:
            return []
        calls = route.replica.transfer()
        tasks = []
        for handle, op in jobs:
            data = op.flat_bytes()
            for s, (begin, end) in enumerate(stripes(len(data), limits.chunk_bytes, len(calls))):
                upload = calls[(len(tasks)) % len(calls)][0]
                chunks = chunks_of(handle, data, begin, end, limits.chunk_bytes)
                tasks.append(self._pool.submit(self._stream_upload, upload, chunks, route,
                                               deadline))
        return tasks

    def _stream_upload(self, upload, chunks, route, deadline):
        try:
            upload(chunks, timeout=self._remaining(deadline), metadata=self._metadata(route))
        except grpc.RpcError as e:
            raise GemmError.from_rpc_error(e) from None

    def _download_into(self, route, handle, flat, deadline, limits, release=False):
        """Downloads the matrix into `flat`, its stripes at once; with
        `release` the streams ask the server to release it once read
        (release_after_download). Returns whether the server did so."""
        dst = memoryview(flat).cast("B")
        calls = route.replica.transfer()
        tasks = [self._pool.submit(self._stream_download, calls[i % len(calls)][1], handle, dst,
                                   begin, end, route, deadline, limits.chunk_bytes, release)
                 for i, (begin, end) in enumerate(stripes(len(dst), limits.chunk_bytes,
                                                          len(calls)))]
        self._wait_all(tasks)
        return release and released_by_server([t.result() for t in tasks])

    def _stream_download(self, download, handle, dst, begin, end, route, deadline, chunk,
                         release=False):
        """One stripe; returns the stream's trailing metadata."""
        request = gemm_pb2.DownloadRequest(handle=handle, offset=begin, length=end - begin,
                                           chunk_bytes=chunk, release_after_download=release)
        pos = begin
        try:
            call = download(request, timeout=self._remaining(deadline),
                            metadata=self._metadata(route))
            for offset, data in call:
                check_download(offset, data, pos, end, handle)
                dst[offset:offset + len(data)] = data
                pos += len(data)
            trailers = call.trailing_metadata()
        except grpc.RpcError as e:
            raise GemmError.from_rpc_error(e) from None
        if pos != end:
            raise GemmError(grpc.StatusCode.DATA_LOSS,
                            f"download of {handle}: ended at byte {pos} of [{begin}, {end})")
        return tuple(trailers or ())

    @staticmethod
    def _wait_all(tasks):
        """Waits for every task (none is cancelled) and raises the first error."""
        first = None
        for t in tasks:
            try:
                t.result()
            except Exception as e:  # pylint: disable=broad-except
                first = first or e
        if first is not None:
            raise first


"""What Client and AsyncClient share: settings, the replica set, handle
routing and affinity keys, and the decisions that follow a failed call
(retry here after a delay, run the request again on another replica, or
give up). Neither I/O nor waiting happens here, so one copy serves both."""

import logging
import os
import random
import threading
import time

import grpc

from gemm.v1 import gemm_pb2

from gemm_client import fp8, planning
from gemm_client.dtypes import DType
from gemm_client.errors import GemmError, invalid_argument
from gemm_client.problems import decode_result, operand, shaped
from gemm_client.shared_memory import FIRST_OFFSET, SharedMemory
from gemm_client.replicas import ReplicaSet, handle_instance, split_target
from gemm_client.resident import ResidentMatrix
from gemm_client.retry import RetryPolicy, next_retry_delay, parse_pushback
from gemm_client.settings import Settings

_log = logging.getLogger("gemm_client")

# A Download stream's trailer from a server that honoured
# DownloadRequest.release_after_download.
RELEASE_AFTER_DOWNLOAD_KEY = "gemm-release-after-download"

# Refusals of the client's own region after which a request still goes as
# bytes but later ones try again.
_TRANSIENT = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED,
              grpc.StatusCode.CANCELLED)


class Route:
    """Where one request's calls go: a replica and the affinity key they carry."""

    def __init__(self, replica, key):
        self.replica = replica
        self.key = key


class ClientBase:
    """What Client and AsyncClient share: settings, replicas, handle routing."""

    def __init__(self, target, make_channel, **kwargs):
        retry = kwargs.pop("retry", None) or RetryPolicy()
        self._settings = Settings(retry=retry, **kwargs)
        self._settings.validate()
        _, dns = split_target(target)
        settings = self._settings
        creds = settings.credentials()

        def channel_for(address, transfer_index):
            # A single-server target keeps its own name (and gRPC's resolution).
            options = settings.channel_args(transfer_index, dns)
            return make_channel(address, creds, options)

        self._replicas = ReplicaSet(
            target, channel_for, transfer_channels=settings.transfer_channels,
            policy=settings.replica_policy, replica_backoff=settings.replica_backoff,
            resolve_interval=settings.resolve_interval)
        self._lock = threading.Lock()
        self._handle_keys = {}
        self._retries = 0
        # Registered shared-memory regions: region id -> SharedMemory.
        self._shared = {}
        self._auto = _AutoRegions()

    @property
    def settings(self):
        return self._settings

    @property
    def retries(self):
        """Retries made, over all calls and replicas."""
        return self._retries

    def replicas(self):
        """[(address, instance_id, requests, failed_over, active)] per replica."""
        return [(r.address, r.instance_id, r.requests, r.failed_over, r.active)
                for r in self._replicas.all()]

    def _count_retry(self):
        with self._lock:
            self._retries += 1

    def _deadline(self, timeout):
        t = self._settings.timeout if timeout is None else timeout
        if not t > 0:
            raise invalid_argument(f"timeout: must be positive, got {t!r}")
        return time.monotonic() + t

    @staticmethod
    def _remaining(deadline):
        left = deadline - time.monotonic()
        if left <= 0:
            raise GemmError(grpc.StatusCode.DEADLINE_EXCEEDED, "deadline exceeded")
        return left

    def _metadata(self, route):
        return self._settings.metadata(route.key)

    def _note_handle(self, route, handle):
        route.replica.instance_id = handle_instance(handle) or route.replica.instance_id
        if self._settings.affinity_header:
            with self._lock:
                self._handle_keys[handle] = route.key

    def _forget_handle(self, handle):
        with self._lock:
            self._handle_keys.pop(handle, None)

    def _route_for_handles(self, handles, ask_instance):
        replica = self._replicas.owner_of_all(handles, ask_instance)
        with self._lock:
            key = self._handle_keys.get(handles[0], handle_instance(handles[0]))
        return Route(replica, key)

    def _new_route(self, avoid):
        key = planning.new_affinity_key() if self._settings.affinity_header else ""
        return Route(self._replicas.pick(avoid), key)

    def _failover_delay(self, err, handles, attempt, deadline, replica):
        """After a request failed on `replica`: seconds to wait before running it
        again on another replica, or None to raise `err`."""
        is_moved = not handles and planning.moved(err)
        if not (planning.fails_over(err) or is_moved):
            return None
        if not is_moved:
            self._replicas.mark_down(replica)
        if handles or self._replicas.active_count() < 2:
            return None
        delay = next_retry_delay(self._settings.retry, attempt, grpc.StatusCode.UNAVAILABLE,
                                 None, time.monotonic(), deadline, random.random())
        if delay is None:
            return None
        self._replicas.note_failed_over(replica)
        self._count_retry()
        return 0.0 if self._replicas.usable_count(replica) > 0 else delay

    def _retry_delay(self, rpc_error, attempt, deadline, fail_over):
        code = rpc_error.code()
        if fail_over and code == grpc.StatusCode.UNAVAILABLE:
            return None
        trailers = rpc_error.trailing_metadata() if callable(
            getattr(rpc_error, "trailing_metadata", None)) else ()
        delay = next_retry_delay(self._settings.retry, attempt, code, parse_pushback(trailers),
                                 time.monotonic(), deadline, random.random())
        if delay is not None:
            self._count_retry()
        return delay

    def _pipelined_gemm_again(self, err, deadline):
        """After a pipelined Gemm's first attempt failed with `err` and its
        uploads are done: the seconds to wait before sending it again (0 for
        one the server would not hold), or None to raise `err`. It is sent
        once before any retry because a request the server took (held) and
        then refused has released its operands: a retry of it would find
        them gone (see _pipelined_gemm_error)."""
        if planning.not_held(err):
            return 0.0
        delay = next_retry_delay(self._settings.retry, 1, err.code,
                                 parse_pushback(err.trailing_metadata), time.monotonic(),
                                 deadline, random.random())
        if delay is not None:
            self._count_retry()
        return delay

    @staticmethod
    def _pipelined_gemm_error(first, err):
        """The error to raise when a pipelined Gemm sent again (after `first`)
        failed with `err`: `first` when the operands were gone by then (the
        server had taken the first attempt, refused it, and released them)."""
        if err.code == grpc.StatusCode.NOT_FOUND and not planning.not_held(first):
            return first
        return err

    # Shared memory.

    def _note_shared(self, route, region, region_id):
        self._note_handle(route, region_id)
        with self._lock:
            self._shared[region_id] = region

    def _shared_ids(self, region):
        """The region ids to unregister for `region` (a SharedMemory, or an id)."""
        if isinstance(region, SharedMemory):
            with self._lock:
                ids = [rid for rid, r in self._shared.items() if r is region]
            if not ids:
                raise invalid_argument("region: is not registered with this client")
            return ids
        return [str(region)]

    def _forget_shared(self, region_id):
        self._forget_handle(region_id)
        with self._lock:
            self._shared.pop(region_id, None)

    @staticmethod
    def _shared_register_request(region, label):
        if not isinstance(region, SharedMemory):
            raise invalid_argument("region: must be a gemm_client.SharedMemory")
        if region.closed:
            raise invalid_argument("region: is closed")
        request = gemm_pb2.RegisterSharedMemoryRequest(pid=os.getpid(), fd=region.fd,
                                                       bytes=region.nbytes, token=region.token)
        if label is not None:
            request.label = label
        return request

    def _locate(self, array, field):
        """The SharedMemoryRef of `array` when its memory lies in a region
        registered with this client; None when it lies in none; an
        InvalidArgumentError naming `field` when it cannot be named there."""
        with self._lock:
            regions = list(self._shared.items())
        for region_id, region in regions:
            offset = region.offset_of(array)
            if offset is None:
                continue
            if region.closed:
                raise invalid_argument(f"{field}: its shared-memory region is closed")
            low, high = region.extent_of(array)
            if low < FIRST_OFFSET:
                raise invalid_argument(
                    f"{field}: starts at byte {low} of its shared-memory region, inside the "
                    f"first {FIRST_OFFSET} bytes (the region's token)")
            if high > region.nbytes:
                raise invalid_argument(
                    f"{field}: ends at byte {high}, past the end of its shared-memory region "
                    f"({region.nbytes} bytes)")
            if not (array.flags.c_contiguous or array.flags.f_contiguous):
                raise invalid_argument(
                    f"{field}: lies in a shared-memory region but is neither C- nor "
                    "Fortran-contiguous (pass a contiguous copy)")
            return gemm_pb2.SharedMemoryRef(region=region_id, offset=low)
        return None

    def _prepare(self, problems):
        with self._lock:
            any_shared = bool(self._shared)
        return planning.prepare_all(problems, self._locate if any_shared else None)

    def _auto_bytes(self, route, prepared):
        """With shared_memory on: the usable bytes the client's own region
        needs for this request (0: it goes as bytes)."""
        if not self._settings.shared_memory or self._auto.off:
            return 0
        if len(self._replicas.all()) != 1 or not is_local(route.replica.address):
            return 0
        return planning.shared_bytes(prepared)

    def _auto_take(self, need):
        return self._auto.take(need)

    def _auto_put(self, entry):
        self._auto.put(entry)

    def _auto_new(self, need):
        return SharedMemory(_auto_size(need))

    def _auto_refused(self, region, err):
        """The client's own region was refused with `err`: this request goes
        as bytes, and so do all later ones unless the refusal may pass."""
        region.close()
        with self._auto.lock:
            transient = err.code in _TRANSIENT or (
                err.code == grpc.StatusCode.RESOURCE_EXHAUSTED and self._auto.registered)
            if transient or self._auto.off:
                return
            self._auto.off = True
        _log.warning("shared_memory: the server refused this client's shared-memory region "
                     "(%s: %s); sending matrices as bytes from now on",
                     err.code.name, err.message)

    def _auto_registered(self, region, region_id):
        with self._auto.lock:
            self._auto.registered += 1
        return region, region_id

    def _auto_dropped(self):
        with self._auto.lock:
            self._auto.registered -= 1

    def _limits(self, replica):
        return planning.effective_limits(self._settings, replica.limits)

    def _resident(self, route, handle, op, nbytes):
        self._note_handle(route, handle)
        dtype = DType.from_proto(op.quantize.format) if op.quantize is not None else op.dtype
        return ResidentMatrix(self, handle, op.rows, op.cols, dtype, op.layout, nbytes)

    @staticmethod
    def _register_operand(matrix, quantize):
        """The Operand `register` sends: an array as matmul takes, or the codes
        of an fp8.Fp8Matrix (its scales stay with the caller, for problems to
        send), with the gemm.v1 Quantization when `quantize` (an
        fp8.Fp8Quantization) asks the server to keep a float32 or bf16 matrix
        as FP8. InvalidArgumentError naming the field."""
        if isinstance(matrix, fp8.Fp8Matrix):
            if quantize is not None:
                raise invalid_argument("quantize: the matrix is FP8 already")
            op = operand(matrix, "matrix")
            op.scales, op.scale_mode = None, ""
            return op
        op = operand(matrix, "matrix")
        if quantize is not None:
            if not isinstance(quantize, fp8.Fp8Quantization):
                raise invalid_argument(
                    f"quantize: must be a gemm_client.Fp8Quantization, got {quantize!r}")
            if op.dtype not in (DType.FP32, DType.BF16):
                raise invalid_argument(f"matrix: quantize applies to float32 or bf16 "
                                       f"matrices, this one is {op.dtype.name}")
            try:
                q = quantize.checked()
                op.quantize = q.to_proto()
            except ValueError as e:
                raise invalid_argument(str(e)) from None
        return op

    @staticmethod
    def _register_request(op, label):
        request = gemm_pb2.RegisterMatrixRequest(dtype=op.dtype.proto, rows=op.rows,
                                                 cols=op.cols, layout=op.layout)
        request.data = op.flat_bytes().tobytes()
        if label is not None:
            request.label = label
        if op.quantize is not None:
            request.quantize.CopyFrom(op.quantize)
        return request

    @staticmethod
    def _begin_request(op, transient, label):
        request = gemm_pb2.BeginUploadRequest(dtype=op.dtype.proto, rows=op.rows,
                                              cols=op.cols, layout=op.layout,
                                              transient=transient)
        if label is not None:
            request.label = label
        if op.quantize is not None:
            request.quantize.CopyFrom(op.quantize)
        return request

    def _uses_chunks(self, op, limits):
        return ((limits.threshold and op.nbytes >= limits.threshold) or
                op.nbytes + planning.MESSAGE_OVERHEAD > limits.max_message_bytes)


class _AutoRegions:
    """The regions a client with shared_memory=True makes itself: one per
    request in flight, kept for reuse. A request takes a free one large
    enough (or makes one, unregistering a smaller free one) and puts it back
    when it ends, so requests on many threads or tasks never share a region
    nor wait for each other's, and a steady load reuses the same few."""

    def __init__(self):
        self.lock = threading.Lock()
        self.free = []  # (SharedMemory, region id)
        self.registered = 0
        self.off = False

    def take(self, need):
        """(a free entry of at least `need` usable bytes or None, [free
        entries to unregister and close])."""
        with self.lock:
            for k, (region, _) in enumerate(self.free):
                if region.nbytes - FIRST_OFFSET >= need:
                    return self.free.pop(k), []
            return None, [self.free.pop()] if self.free else []

    def put(self, entry):
        with self.lock:
            self.free.append(entry)

    def drain(self):
        with self.lock:
            out, self.free = self.free, []
            return out


def _auto_size(need):
    """A region size for `need` bytes with room to grow: a power of two, at
    least 1 MiB."""
    size = 1 << 20
    while size < need:
        size *= 2
    return size


def is_local(address):
    """Whether a replica address is on this host (loopback or a Unix socket)."""
    if address.startswith(("unix:", "unix-abstract:")):
        return True
    for scheme in ("ipv4:", "ipv6:", "dns:///"):
        if address.startswith(scheme):
            address = address[len(scheme):]
    host = address.rsplit(":", 1)[0].strip("[]") if ":" in address else address
    return (host == "localhost" or host == "::1" or host.startswith("127.") or
            host.startswith("::ffff:127."))


def released_by_server(trailers):
    """Whether the server honoured release_after_download on every stripe of
    a download: `trailers` holds each stream's trailing metadata (each stream
    having ended OK)."""
    return bool(trailers) and all(
        any(k == RELEASE_AFTER_DOWNLOAD_KEY for k, _ in (t or ())) for t in trailers)


def check_download(offset, data, expected, end, handle):
    """DATA_LOSS unless a downloaded chunk starts where the last ended, within
    its stripe."""
    if offset != expected or offset + len(data) > end:
        raise GemmError(grpc.StatusCode.DATA_LOSS,
                        f"download of {handle}: got bytes [{offset}, {offset + len(data)}) "
                        f"where [{expected}, {end}) was due")


def decode(result, index, prepared):
    """Result number `index` of the problems `prepared` as a numpy array (an
    fp8.GemmResult with the precision record for an FP8 problem): the `out`
    array a problem named (a copy of it for the client's own region)."""
    field = f"results[{index}]" if len(prepared) > 1 else "result"
    p = prepared[index]
    if p.out is None:
        out = decode_result(result, field)
    else:
        shared = gemm_pb2.SharedMemoryRef.FromString(bytes(result.shared or b""))
        if shared != p.proto.output:
            raise GemmError(grpc.StatusCode.DATA_LOSS,
                            f"{field}: does not name the output it was given in shared memory")
        out = p.out.copy(order="K") if p.copy_out else p.out
    return fp8.with_precision(out, result.a_precision, result.b_precision)


def downloaded(result, flat):
    """A kept result's downloaded bytes as its matrix, as decode gives it."""
    out = shaped(flat, result.rows, result.cols, result.layout)
    return fp8.with_precision(out, result.a_precision, result.b_precision)

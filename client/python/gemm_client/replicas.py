"""The replicas a target names, and which one a request goes to
(docs/replicas.md): the same rules as the C++ client.

A target is one server ("host:port", "unix:path"), an address list
("ipv4:10.0.0.1:50051,10.0.0.2:50051", "ipv6:..."), a "dns:///name:port"
whose addresses are the replicas (looked up again every resolve_interval and
when a replica fails), or a Python list of targets. A request's calls all go
to one replica; a call naming a handle goes to the replica whose instance id
starts the handle; requests naming none go to the replica with the fewest of
this client's requests in flight ("least_outstanding", ties in turn) or each
in turn ("round_robin"). A replica that failed with UNAVAILABLE is avoided
for replica_backoff seconds.

Channels are made by a factory (sync or asyncio), so this module is shared by
Client and AsyncClient; its state is guarded by one lock.
"""

import re
import socket
import threading
import time

import grpc

from gemm.v1 import gemm_pb2, gemm_pb2_grpc

from gemm_client.wire import decode_chunk, decode_response, encode_chunk
from gemm_client.errors import GemmError

_HANDLE = re.compile(r"^([0-9a-f]{16})-[0-9a-f]{32}$")

POLICIES = ("least_outstanding", "round_robin")


def handle_instance(handle):
    """The server instance id a handle names, or "" for one without."""
    m = _HANDLE.match(handle or "")
    return m.group(1) if m else ""


def split_target(target):
    """(addresses, dns (name, port) or None) for a target string or list."""
    if isinstance(target, (list, tuple)):
        if not target:
            raise ValueError("target: the list of replicas is empty")
        return [str(t) for t in target], None
    if not isinstance(target, str) or not target:
        raise ValueError("target: must be a non-empty string or list of strings")
    for scheme in ("ipv4:", "ipv6:"):
        if target.startswith(scheme):
            return [scheme + a for a in target[len(scheme):].split(",") if a], None
    if target.startswith("dns:"):
        rest = target[4:]
        if rest.startswith("//"):
            slash = rest.find("/", 2)
            if slash < 0:
                raise ValueError(f'target: "{target}" is not dns:///name:port')
            rest = rest[slash + 1:]
        if not rest:
            raise ValueError(f'target: "{target}" is not dns:///name:port')
        if ":" in rest and not rest.endswith("]"):
            name, port = rest.rsplit(":", 1)
        else:
            name, port = rest, "443"
        name = name[1:-1] if name.startswith("[") and name.endswith("]") else name
        if not name:
            raise ValueError(f'target: "{target}" is not dns:///name:port')
        return [], (name, port)
    return [target], None


def resolve(name, port):
    """Sorted channel targets of the addresses `name` has; UNAVAILABLE otherwise."""
    try:
        infos = socket.getaddrinfo(name, port, type=socket.SOCK_STREAM)
    except socket.gaierror as e:
        raise GemmError(grpc.StatusCode.UNAVAILABLE, f'resolving "{name}": {e}') from None
    out = set()
    for family, _, _, _, addr in infos:
        out.add(f"ipv6:[{addr[0]}]:{port}" if family == socket.AF_INET6
                else f"ipv4:{addr[0]}:{port}")
    if not out:
        raise GemmError(grpc.StatusCode.UNAVAILABLE, f'"{name}" has no address')
    return sorted(out)


class Replica:
    """One replica: its channels (made on first use) and what is known of it."""

    def __init__(self, address, make_channel, transfer_channels):
        self.address = address
        self._make_channel = make_channel
        self._transfer_count = transfer_channels
        self._lock = threading.Lock()
        self._channel = None
        self._stub = None
        self._gemm = None
        self._transfer = None
        self.instance_id = ""
        self.limits = None  # gemm.v1.Limits once learned
        self.active = True
        self.down_until = 0.0
        self.outstanding = 0
        self.requests = 0
        self.failed_over = 0

    @property
    def channel(self):
        with self._lock:
            if self._channel is None:
                self._channel = self._make_channel(self.address, None)
            return self._channel

    @property
    def stub(self):
        if self._stub is None:
            stub = gemm_pb2_grpc.GemmServiceStub(self.channel)
            with self._lock:
                if self._stub is None:
                    self._stub = stub
        return self._stub

    @property
    def gemm(self):
        """GemmService.Gemm taking a request serialized by wire.encode_request
        and returning wire.decode_response's results."""
        if self._gemm is None:
            call = self.channel.unary_unary("/gemm.v1.GemmService/Gemm",
                                            response_deserializer=decode_response)
            with self._lock:
                if self._gemm is None:
                    self._gemm = call
        return self._gemm

    def transfer(self):
        """(upload, download) calls of gemm.v1.Transfer, one pair per channel
        that one matrix's chunks are striped over; each channel is its own
        connection (distinct channel arguments and a local subchannel pool).
        Chunks are (de)serialized by chunk_wire, not as protobuf objects."""
        with self._lock:
            if self._transfer is None:
                self._transfer = []
                for i in range(self._transfer_count):
                    ch = self._make_channel(self.address, i)
                    upload = ch.stream_unary(
                        "/gemm.v1.Transfer/Upload", request_serializer=encode_chunk,
                        response_deserializer=gemm_pb2.UploadSummary.FromString)
                    download = ch.unary_stream(
                        "/gemm.v1.Transfer/Download",
                        request_serializer=gemm_pb2.DownloadRequest.SerializeToString,
                        response_deserializer=decode_chunk)
                    self._transfer.append((ch, upload, download))
            return [(u, d) for _, u, d in self._transfer]

    def channels(self):
        with self._lock:
            extra = [ch for ch, _, _ in self._transfer or []]
            return [c for c in [self._channel] + extra if c is not None]

    def usable(self, now):
        return self.active and self.down_until <= now


class ReplicaSet:
    """Every replica the target named since the client was made."""

    def __init__(self, target, make_channel, *, transfer_channels, policy, replica_backoff,
                 resolve_interval):
        if policy not in POLICIES:
            raise ValueError(f"replica_policy: must be one of {POLICIES}, got {policy!r}")
        if replica_backoff < 0:
            raise ValueError("replica_backoff: must not be negative")
        if resolve_interval <= 0:
            raise ValueError("resolve_interval: must be positive")
        self.target = target
        self._make_channel = make_channel
        self._transfer_channels = transfer_channels
        self._policy = policy
        self._backoff = replica_backoff
        self._resolve_interval = resolve_interval
        self._lock = threading.Lock()
        self._turn = 0
        self._replicas = []
        self._resolve_error = ""
        addresses, self._dns = split_target(target)
        for a in addresses:
            self._replicas.append(Replica(a, make_channel, transfer_channels))
        self._last_resolve = float("-inf")
        self._resolve_now = False
        if self._dns:
            self.resolve(force=True)

    def resolve(self, force=False):
        """Looks a "dns:" target up again (at most once a second unless forced);
        a failed lookup keeps the last set, since its replicas may still serve."""
        if not self._dns:
            return
        now = time.monotonic()
        with self._lock:
            if not force and now - self._last_resolve < 1.0:
                return
            self._last_resolve = now
            self._resolve_now = False
        try:
            found = resolve(*self._dns)
        except GemmError as e:
            with self._lock:
                self._resolve_error = e.message
            return
        with self._lock:
            self._resolve_error = ""
            for r in self._replicas:
                r.active = r.address in found
            known = {r.address for r in self._replicas}
            for a in found:
                if a not in known:
                    self._replicas.append(Replica(a, self._make_channel,
                                                  self._transfer_channels))

    def _maybe_resolve(self):
        if self._dns and (self._resolve_now or
                          time.monotonic() - self._last_resolve >= self._resolve_interval):
            self.resolve()

    def all(self):
        with self._lock:
            return list(self._replicas)

    def active_count(self):
        with self._lock:
            return sum(1 for r in self._replicas if r.active)

    def usable_count(self, except_replica=None):
        now = time.monotonic()
        with self._lock:
            return sum(1 for r in self._replicas if r is not except_replica and r.usable(now))

    def pick(self, avoid=None):
        """The replica for a request that names no handle."""
        self._maybe_resolve()
        now = time.monotonic()
        with self._lock:
            active = [r for r in self._replicas if r.active]
            usable = [r for r in active if r is not avoid and r.usable(now)]
            # None known up: try any other of the set (one may be back).
            if not usable:
                usable = [r for r in active if r is not avoid] or active
            if not usable:
                extra = f" ({self._resolve_error})" if self._resolve_error else ""
                raise GemmError(grpc.StatusCode.UNAVAILABLE,
                                f'target "{self.target}" names no replica{extra}')
            turn = self._turn
            self._turn += 1
            if self._policy == "least_outstanding":
                fewest = min(r.outstanding for r in usable)
                usable = [r for r in usable if r.outstanding == fewest]
            return usable[turn % len(usable)]

    def owner(self, handle, ask_instance):
        """The replica that issued `handle`. `ask_instance(replica)` learns a
        replica's instance id (GetServerInfo) when no known one matches."""
        instance = handle_instance(handle)
        replicas = self.all()
        if len(replicas) == 1:
            return replicas[0]
        if not instance:
            return self.pick()
        for r in replicas:
            if r.instance_id == instance:
                return r
        for unknown_only in (True, False):
            for r in replicas:
                if not r.active or (unknown_only and r.instance_id):
                    continue
                ask_instance(r)
                if r.instance_id == instance:
                    return r
        raise GemmError(
            grpc.StatusCode.FAILED_PRECONDITION,
            f'handle "{handle}" belongs to server instance {instance}, which is not among '
            f'the replicas of "{self.target}" now (it restarted or left the set: its '
            "matrices are gone)")

    def owner_of_all(self, handles, ask_instance):
        owner = None
        for h in handles:
            r = self.owner(h, ask_instance)
            if owner is not None and r is not owner:
                raise GemmError(
                    grpc.StatusCode.INVALID_ARGUMENT,
                    f"the request names handles of two servers ({owner.address} and "
                    f"{r.address}): one request's matrices must live on one replica")
            owner = r
        return owner

    def mark_down(self, replica):
        with self._lock:
            replica.down_until = max(replica.down_until, time.monotonic() + self._backoff)
            self._resolve_now = True

    def begin(self, replica):
        with self._lock:
            replica.requests += 1
            replica.outstanding += 1

    def end(self, replica):
        with self._lock:
            replica.outstanding -= 1

    def note_failed_over(self, replica):
        with self._lock:
            replica.failed_over += 1

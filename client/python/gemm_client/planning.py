"""What one request sends, decided the same way by Client and AsyncClient
(and by the C++ client, client/gemm_client_chunked.cc): which operands go as
chunks (gemm.v1.Transfer) and whether results come back that way.

An operand of at least chunked_threshold_bytes is uploaded on its own as a
transient resident matrix and named by handle; so is every operand over 4 KiB
when the request as a whole would not fit in one message. Results are kept on
the server and downloaded when they are that large together. The server's own
limits (GetServerInfo) cap the message and chunk sizes.
"""

import dataclasses
import random

import grpc

from gemm.v1 import gemm_pb2

from gemm_client import problems as problems_mod
from gemm_client import wire
from gemm_client.errors import GemmError
from gemm_client.shared_memory import FIRST_OFFSET, align_up

# Room for a message's framing and fields besides the matrices.
MESSAGE_OVERHEAD = 4096


def supports_deterministic():
    """Whether this client's gemm.v1 has GemmRequest.deterministic."""
    return "deterministic" in gemm_pb2.GemmRequest.DESCRIPTOR.fields_by_name


def request_base(priority, deterministic):
    """A GemmRequest with its request-wide fields set."""
    request = gemm_pb2.GemmRequest(priority=int(priority))
    if deterministic is not None:
        if not supports_deterministic():
            raise GemmError(
                grpc.StatusCode.UNIMPLEMENTED,
                "deterministic: this client's gemm.v1 API has no GemmRequest.deterministic "
                "field, so the request cannot ask for it (leave deterministic=None)")
        request.deterministic = bool(deterministic)
    return request


def prepare_all(problem_list, locate=None):
    """Checks every problem; field names carry "problems[i]." when there are
    several. locate: as problems.operand takes it."""
    problem_list = list(problem_list)
    if not problem_list:
        raise problems_mod.invalid_argument("problems: is empty")
    prefix = len(problem_list) > 1
    out = []
    for i, p in enumerate(problem_list):
        if isinstance(p, (tuple, list)):
            p = problems_mod.Problem(*p)
        elif isinstance(p, dict):
            p = problems_mod.Problem(**p)
        out.append(problems_mod.prepare(p, f"problems[{i}]." if prefix else "", locate))
    return out


def handles_of(prepared):
    """The handles and shared-memory regions the problems name: the request
    goes to the replica that issued them."""
    out = [op.handle for p in prepared for op in p.operands.values() if op.handle]
    out += [op.shared.region for p in prepared for op in p.operands.values() if op.shared]
    return out + [p.proto.output.region for p in prepared if p.proto.HasField("output")]


@dataclasses.dataclass
class Limits:
    """The effective limits for one replica."""

    max_message_bytes: int
    chunk_bytes: int
    threshold: int


def effective_limits(settings, server_limits):
    """The client's settings capped by what the server said (None = unknown)."""
    max_message = settings.max_message_bytes
    chunk = settings.chunk_bytes
    if server_limits is not None:
        if server_limits.max_message_bytes:
            max_message = min(max_message, server_limits.max_message_bytes)
        if server_limits.max_chunk_bytes:
            chunk = min(chunk, server_limits.max_chunk_bytes)
    chunk = max(1, min(chunk, max_message - MESSAGE_OVERHEAD))
    return Limits(max_message, chunk, settings.chunked_threshold_bytes)


@dataclasses.dataclass
class Plan:
    """A request: which operands to upload first, and whether to keep results."""

    request: object  # gemm_pb2.GemmRequest's request-wide fields (problems: see encode)
    uploads: list  # (problem index, operand name, Operand)
    keep_results: bool


def plan(prepared, base, limits):
    inline_bytes = sum((0 if op.handle or op.shared else op.nbytes) + op.scale_bytes
                       for p in prepared for op in p.operands.values())
    result_bytes = sum(p.result_bytes for p in prepared)
    too_big = inline_bytes + MESSAGE_OVERHEAD * len(prepared) > limits.max_message_bytes
    threshold = limits.threshold or float("inf")
    uploads = []
    for i, p in enumerate(prepared):
        for name, op in p.operands.items():
            if not op.handle and not op.shared and (op.nbytes >= threshold or
                                  (too_big and op.nbytes > MESSAGE_OVERHEAD)):
                uploads.append((i, name, op))
    keep = (result_bytes >= threshold or
            result_bytes + MESSAGE_OVERHEAD * len(prepared) > limits.max_message_bytes)
    if keep and any(p.out is not None for p in prepared):
        # The server takes a shared-memory output only without keep_results.
        raise problems_mod.invalid_argument(
            "out: the other problems' results need keep_results (they are too large for "
            "one message), which a shared-memory output excludes: send them apart")
    request = gemm_pb2.GemmRequest()
    request.CopyFrom(base)
    request.keep_results = keep
    return Plan(request, uploads, keep)


def encode(plan_, prepared, uploaded, release_after_use=False):
    """The serialized request: operands by bytes or by handle (`uploaded` maps
    (problem index, operand name) to the handle of its upload). With
    release_after_use the uploaded operands carry Matrix.release_after_use
    (the server releases them when the request ends); the caller's own
    resident matrices never do."""
    problems = []
    for i, p in enumerate(prepared):
        operands = {}
        for name, op in p.operands.items():
            upload = uploaded.get((i, name))
            handle = upload or op.handle
            inline = not handle and op.shared is None
            operands[name] = (op.layout, handle, op.flat_bytes() if inline else None,
                              op.scales_proto(), bool(upload and release_after_use),
                              None if handle else op.shared)
        problems.append((p.proto, operands))
    return wire.encode_request(plan_.request, problems)


def _shared_places(prepared):
    """Where into_region puts things: [(problem index, operand name or
    "out", offset)] and the end of the last, ALIGNMENT-aligned as the C++
    CLI lays a request out (client/cli/shared_requests.cc): every operand
    given by bytes, then every output not given."""
    end = align_up(FIRST_OFFSET)
    places = []
    for i, p in enumerate(prepared):
        for name, op in p.operands.items():
            if op.array is not None and not op.handle and op.shared is None:
                places.append((i, name, end))
                end = align_up(end + op.nbytes)
    for i, p in enumerate(prepared):
        if p.out is None:
            places.append((i, "out", end))
            end = align_up(end + p.d_bytes)
    return places, end


def shared_bytes(prepared):
    """The usable bytes a region needs for into_region."""
    return _shared_places(prepared)[1] - FIRST_OFFSET


def into_region(prepared, region, region_id):
    """The problems with every operand given by bytes copied into `region`
    (a registered shared_memory.SharedMemory) and named there, and every
    output written there, to be copied out (Prepared.copy_out)."""
    places, _ = _shared_places(prepared)
    out = [dataclasses.replace(p, operands=dict(p.operands)) for p in prepared]
    for i, name, offset in places:
        p = out[i]
        ref = gemm_pb2.SharedMemoryRef(region=region_id, offset=offset)
        if name == "out":
            proto = gemm_pb2.GemmProblem()
            proto.CopyFrom(p.proto)
            proto.output.CopyFrom(ref)
            order = "C" if p.out_layout == problems_mod.ROW_MAJOR else "F"
            p.proto = proto
            p.out = region.view(offset, (proto.m, proto.n), p.out_dtype.numpy, order)
            p.copy_out = True
            continue
        op = p.operands[name]
        order = "C" if op.layout == problems_mod.ROW_MAJOR else "F"
        placed = region.view(offset, op.array.shape, op.array.dtype, order)
        placed[...] = op.array
        p.operands[name] = dataclasses.replace(op, array=placed, shared=ref)
    return out


def new_affinity_key():
    return f"{random.getrandbits(64):016x}"


def fails_over(err):
    """The replica refused the request while draining, is down, or cut the
    call off as it stopped (gRPC's bare CANCELLED for a call that reached a
    stopping server's transport; "problems[0].a: CANCELLED" on the chunked
    path)."""
    if err.code == grpc.StatusCode.UNAVAILABLE:
        return True
    return err.code == grpc.StatusCode.CANCELLED and (
        err.message == "CANCELLED" or err.message.endswith(": CANCELLED"))


def moved(err):
    """Behind an L7 proxy, a call the proxy sent to another backend finds the
    request's own uploads missing: the whole request can run again."""
    return (err.code == grpc.StatusCode.FAILED_PRECONDITION and
            "belongs to another server" in err.message)


def not_held(err):
    """A Gemm sent while its uploads were still under way was refused rather
    than held until they completed (a server that predates pipelined requests,
    or one run with --max_waiting_requests=0): it goes again once they are
    done, and the client releases the uploads itself (such a server may not
    know Matrix.release_after_use)."""
    return (err.code == grpc.StatusCode.FAILED_PRECONDITION and
            "is unfinished" in err.message)

"""Protobuf's wire format, by hand, for the messages that carry matrix bytes:
a GemmRequest is written with every operand's bytes spliced in straight from
its array, and a GemmResponse and a Chunk are read with their matrix bytes
left where they arrived (memoryviews of the received message). Building
these as protobuf objects would copy each matrix two or three times more.
Field numbers come from the generated descriptors; the small fields are
still serialized by protobuf.
"""

import dataclasses

from gemm.v1 import gemm_pb2

_LEN = 2  # wire type of length-delimited fields
_PROBLEMS = gemm_pb2.GemmRequest.DESCRIPTOR.fields_by_name["problems"].number
_OPERAND = {name: gemm_pb2.GemmProblem.DESCRIPTOR.fields_by_name[name].number
            for name in ("a", "b", "c")}
_MATRIX_DATA = gemm_pb2.Matrix.DESCRIPTOR.fields_by_name["data"].number
_RESULTS = gemm_pb2.GemmResponse.DESCRIPTOR.fields_by_name["results"].number
_RESULT_FIELDS = {f.number: f.name for f in gemm_pb2.GemmResult.DESCRIPTOR.fields}
_CHUNK = {f.name: f.number for f in gemm_pb2.Chunk.DESCRIPTOR.fields}


def varint(value):
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if not value:
            out.append(byte)
            return bytes(out)
        out.append(byte | 0x80)


def read_varint(buf, pos):
    result = shift = 0
    while True:
        if pos >= len(buf) or shift > 63:
            raise ValueError("truncated or oversized varint")
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7


def key(field, wire_type):
    return varint(field << 3 | wire_type)


def length_delimited(field, parts):
    """The field's key and length, then `parts` (bytes-like), as a list."""
    return [key(field, _LEN), varint(sum(len(p) for p in parts))] + parts


def fields(buf):
    """(field number, value) of each field of a serialized message: ints for
    varints, memoryviews of `buf` for length-delimited fields."""
    buf = memoryview(buf)
    pos = 0
    while pos < len(buf):
        k, pos = read_varint(buf, pos)
        field, wire = k >> 3, k & 7
        if wire == 0:
            value, pos = read_varint(buf, pos)
        elif wire == _LEN:
            size, pos = read_varint(buf, pos)
            if pos + size > len(buf):
                raise ValueError("truncated length-delimited field")
            value, pos = buf[pos:pos + size], pos + size
        elif wire == 1:
            value, pos = bytes(buf[pos:pos + 8]), pos + 8
        elif wire == 5:
            value, pos = bytes(buf[pos:pos + 4]), pos + 4
        else:
            raise ValueError(f"unsupported wire type {wire}")
        yield field, value


def encode_request(base, problems):
    """A serialized GemmRequest: `base`'s request-wide fields, then each of
    `problems`, a list of (shape-only GemmProblem, {"a"|"b"|"c": (layout,
    handle or None, stored bytes as a memoryview or None, gemm.v1 Scales or
    None, release_after_use, gemm.v1 SharedMemoryRef or None)})."""
    parts = [base.SerializeToString()]
    for shape, operands in problems:
        body = [shape.SerializeToString()]
        for name, (layout, handle, data, scales, release, shared) in operands.items():
            small = gemm_pb2.Matrix(layout=layout, handle=handle or "",
                                    release_after_use=bool(handle and release))
            if shared is not None:
                small.shared.CopyFrom(shared)
            if scales is not None:
                small.scales.CopyFrom(scales)
            matrix = [small.SerializeToString()]
            if data is not None:
                matrix += length_delimited(_MATRIX_DATA, [data])
            body += length_delimited(_OPERAND[name], matrix)
        parts += length_delimited(_PROBLEMS, body)
    return b"".join(parts)


@dataclasses.dataclass
class ResultView:
    """A GemmResult whose data is a memoryview of the received response."""

    dtype: int = 0
    layout: int = 0
    rows: int = 0
    cols: int = 0
    data: memoryview = b""
    handle: str = ""
    # Serialized gemm.v1.OperandPrecision, for FP8 problems only.
    a_precision: memoryview = None
    b_precision: memoryview = None
    # Serialized gemm.v1.SharedMemoryRef, for a result written there.
    shared: memoryview = None


def decode_response(raw):
    """The results of a serialized GemmResponse (the other fields are not read)."""
    results = []
    for field, value in fields(raw):
        if field != _RESULTS:
            continue
        r = ResultView()
        for f, v in fields(value):
            name = _RESULT_FIELDS.get(f)
            if name == "handle":
                v = bytes(v).decode("utf-8")
            if name is not None:
                setattr(r, name, v)
        results.append(r)
    return results


def encode_chunk(chunk):
    """Serializes (handle, offset, data as bytes-like) as a gemm.v1.Chunk."""
    handle, offset, data = chunk
    parts = length_delimited(_CHUNK["handle"], [handle.encode("utf-8")])
    if offset:
        parts += [key(_CHUNK["offset"], 0), varint(offset)]
    return b"".join(parts + length_delimited(_CHUNK["data"], [data]))


def decode_chunk(raw):
    """A serialized gemm.v1.Chunk as (offset, data as a memoryview of `raw`)."""
    offset, data = 0, memoryview(b"")
    for field, value in fields(raw):
        if field == _CHUNK["offset"]:
            offset = value
        elif field == _CHUNK["data"]:
            data = value
    return offset, data

"""gemm.v1.Chunk on the wire, written and read by hand so that chunk bytes go
straight from the caller's array into the message and from the message into
the result array (a protobuf Chunk object would copy them once more each
way). The format is plain protobuf: handle = 1 (string), offset = 2
(uint64), data = 3 (bytes); unknown fields are skipped.

Also how one matrix's bytes split into stripes, as the C++ client splits them.
"""

_HANDLE_TAG = b"\x0a"
_OFFSET_TAG = b"\x10"
_DATA_TAG = b"\x1a"


def _varint(value):
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def encode_chunk(chunk):
    """Serializes (handle: str, offset: int, data: bytes-like) as a Chunk."""
    handle, offset, data = chunk
    h = handle.encode("utf-8")
    parts = [_HANDLE_TAG, _varint(len(h)), h]
    if offset:
        parts += [_OFFSET_TAG, _varint(offset)]
    parts += [_DATA_TAG, _varint(len(data)), data]
    return b"".join(parts)


def _read_varint(buf, pos):
    result = 0
    shift = 0
    while True:
        if pos >= len(buf) or shift > 63:
            raise ValueError("truncated or oversized varint in a Chunk")
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7


def decode_chunk(raw):
    """Parses a serialized Chunk into (offset, data as a memoryview of `raw`)."""
    buf = memoryview(raw)
    pos, offset, data = 0, 0, buf[0:0]
    while pos < len(buf):
        key, pos = _read_varint(buf, pos)
        field, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _read_varint(buf, pos)
            if field == 2:
                offset = value
        elif wire == 2:
            size, pos = _read_varint(buf, pos)
            if pos + size > len(buf):
                raise ValueError("truncated field in a Chunk")
            if field == 3:
                data = buf[pos:pos + size]
            pos += size
        elif wire == 1:
            pos += 8
        elif wire == 5:
            pos += 4
        else:
            raise ValueError(f"unsupported wire type {wire} in a Chunk")
    return offset, data


def stripes(nbytes, chunk_bytes, count):
    """[begin, end) byte ranges: `nbytes` split into at most `count` contiguous
    ranges, each a whole number of chunks (the last may be short), none empty."""
    if nbytes <= 0:
        return []
    chunk_bytes = max(1, chunk_bytes)
    chunks = -(-nbytes // chunk_bytes)
    n = min(chunks, max(1, count))
    return [(chunks * i // n * chunk_bytes, min(nbytes, chunks * (i + 1) // n * chunk_bytes))
            for i in range(n)]


def chunks_of(handle, data, begin, end, chunk_bytes):
    """The Chunk tuples of bytes [begin, end) of `data` (a flat uint8 memoryview)."""
    for offset in range(begin, end, chunk_bytes):
        yield (handle, offset, data[offset:min(end, offset + chunk_bytes)])

"""How one matrix's bytes split into stripes and chunks, as the C++ client
splits them (client/chunked_transfer.cc). The Chunk messages themselves are
written and read in wire.py."""


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

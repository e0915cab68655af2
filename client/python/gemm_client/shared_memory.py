"""gemm_client.SharedMemory: memory a client on the server's host shares with
the server, so that problems name matrices in it (gemm.v1 Matrix.shared) and
have results written into it (GemmProblem.output) instead of sending bytes.
The Python form of the C++ client's client/shared_memory.h.

    region = gemm_client.SharedMemory(64 << 20)
    a = region.copy_in(a)                  # or region.empty(shape, dtype), filled in place
    b = region.copy_in(b)
    d = region.empty((m, n), np.float32)
    client.register_shared_memory(region)
    client.matmul(a, b, out=d)             # d now holds A @ B

The memory is a memfd sealed against shrinking and growing (the server's
mapping can never fault) whose first FIRST_OFFSET bytes hold a random token
proving to the server that the caller can read it. The server reaches it
through /proc/PID/fd/FD: the client must run on the server's host, in its PID
namespace, as the same user (or the server with CAP_SYS_PTRACE), and connect
over loopback or a Unix socket. Do not write a matrix while a request that
reads it runs (that request's results are then undefined; nothing else is
affected).

Arrays handed out are plain numpy arrays (views of the mapping); any array
whose memory lies in the region (slices and transposes of them too) is
recognized by the client, which finds its offset from its address.
"""

import fcntl
import mmap
import os
import threading
import weakref

import numpy as np

# Where matrices may start: the token comes first.
FIRST_OFFSET = 64
# Every array empty() and copy_in() place starts on this boundary.
ALIGNMENT = 256
TOKEN_BYTES = 32


def align_up(x, alignment=ALIGNMENT):
    return (x + alignment - 1) // alignment * alignment


class SharedMemory:
    """A region of `nbytes` usable bytes (from FIRST_OFFSET on), zeroed.

    empty() and copy_in() place arrays one after another (ALIGNMENT-byte
    aligned); MemoryError when the region is full. close() unmaps the region
    once no array of it is left (numpy views keep the mapping alive) and
    makes it unusable: nothing more is placed in it, and clients refuse its
    arrays. A client that registered it should unregister it first."""

    def __init__(self, nbytes):
        nbytes = int(nbytes)
        if nbytes < 1:
            raise ValueError(f"nbytes: must be at least 1, got {nbytes}")
        self._size = FIRST_OFFSET + nbytes
        fd = os.memfd_create("gemm-shared-memory", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
        try:
            os.ftruncate(fd, self._size)
            # Never shrinks (the server's mapping cannot fault) nor grows (the
            # size registered stays the size).
            fcntl.fcntl(fd, fcntl.F_ADD_SEALS,
                        fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SEAL)
            self._map = mmap.mmap(fd, self._size, mmap.MAP_SHARED,
                                  mmap.PROT_READ | mmap.PROT_WRITE)
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd
        self._token = os.urandom(TOKEN_BYTES)
        self._map[:TOKEN_BYTES] = self._token
        self._bytes = np.frombuffer(self._map, dtype=np.uint8)
        self._address = self._bytes.ctypes.data
        self._mapped = weakref.ref(self._map)
        self._lock = threading.Lock()
        self._next = align_up(FIRST_OFFSET)
        self._closed = False

    @property
    def nbytes(self):
        """The whole region, token included."""
        return self._size

    @property
    def fd(self):
        return self._fd

    @property
    def token(self):
        return self._token

    @property
    def closed(self):
        return self._closed

    def empty(self, shape, dtype, order="C"):
        """A new uninitialized array placed in the region."""
        dtype = np.dtype(dtype)
        if order not in ("C", "F"):
            raise ValueError(f"order: must be 'C' or 'F', got {order!r}")
        shape = tuple(int(s) for s in np.atleast_1d(shape))
        nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        with self._lock:
            self._check_open()
            offset = self._next
            if offset + nbytes > self._size:
                raise MemoryError(f"the shared-memory region has {self._size - offset} bytes "
                                  f"left, {nbytes} asked")
            self._next = align_up(offset + max(nbytes, 1))
        return self.view(offset, shape, dtype, order)

    def copy_in(self, array):
        """A copy of `array` placed in the region, Fortran-ordered if `array`
        is (and not C-ordered), else C-ordered."""
        array = np.asarray(array)
        order = "F" if array.flags.f_contiguous and not array.flags.c_contiguous else "C"
        out = self.empty(array.shape, array.dtype, order)
        np.copyto(out, array)
        return out

    def view(self, offset, shape, dtype, order="C"):
        """The array of `shape` at byte `offset` (no allocation: see empty)."""
        self._check_open()
        dtype = np.dtype(dtype)
        count = int(np.prod(shape, dtype=np.int64))
        if offset < FIRST_OFFSET or offset + count * dtype.itemsize > self._size:
            raise ValueError(f"offset: [{offset}, {offset + count * dtype.itemsize}) is not "
                             f"within [{FIRST_OFFSET}, {self._size})")
        flat = self._bytes[offset:offset + count * dtype.itemsize].view(dtype)
        return flat.reshape(shape, order=order)

    def offset_of(self, array):
        """The byte offset of `array`'s first element if its memory lies
        (at least partly) in this region's mapping, else None."""
        if self._mapped() is None:
            return None  # unmapped: the address range may hold other memory now
        low, high = np.byte_bounds(array)
        if high <= self._address or low >= self._address + self._size:
            return None
        return low - self._address

    def extent_of(self, array):
        """(first byte, one past the last) of `array`'s memory, as offsets."""
        low, high = np.byte_bounds(array)
        return low - self._address, high - self._address

    def close(self):
        """Makes the region unusable and unmaps it once no array of it is left."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        os.close(self._fd)
        self._bytes = None
        try:
            self._map.close()
        except BufferError:
            pass  # arrays of it remain: the mapping goes when the last one does
        self._map = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _check_open(self):
        if self._closed:
            raise ValueError("the shared-memory region is closed")

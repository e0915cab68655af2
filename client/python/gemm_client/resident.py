"""Matrices stored on the server (RegisterMatrix / BeginUpload), usable as
operands of later requests in place of their bytes."""

import dataclasses

from gemm_client.dtypes import DType
from gemm_client.problems import COL_MAJOR


@dataclasses.dataclass
class ResidentMatrix:
    """A registered matrix: pass it as a, b or c; release it when done, or use
    it as a context manager (`with client.register(w) as w_dev: ...`), or
    `async with` for AsyncClient. Its handle works only for the identity (token)
    that registered it, on the server that issued it.

    rows, cols, dtype, layout: as stored. nbytes: what it holds against the
    server's max_resident_bytes.
    """

    client: object
    handle: str
    rows: int
    cols: int
    dtype: DType
    layout: int
    nbytes: int
    released: bool = False

    @property
    def shape(self):
        return (self.rows, self.cols)

    @property
    def order(self):
        """"F" for a column-major matrix, else "C"."""
        return "F" if self.layout == COL_MAJOR else "C"

    def release(self, timeout=None):
        """Frees it once requests in flight are done with it (NOT_FOUND if it is
        gone already). A coroutine for AsyncClient."""
        self.released = True
        return self.client.release(self.handle, timeout=timeout)

    def to_numpy(self, timeout=None):
        """Its contents, downloaded in chunks. A coroutine for AsyncClient."""
        return self.client.download(self, timeout=timeout)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if not self.released:
            self.release()

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc):
        if not self.released:
            await self.release()

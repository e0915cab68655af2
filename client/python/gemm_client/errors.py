"""The one exception the client raises for a failed call or a bad argument."""

import grpc


class GemmError(Exception):
    """A call failed, or its arguments were refused before sending.

    code: a grpc.StatusCode (INVALID_ARGUMENT for arguments refused here,
    with the field named in the message as the server would).
    message: the status message. details: the server's status details when
    it sent any (else the message). trailing_metadata: the call's trailers,
    a tuple of (key, value) pairs (empty for client-side errors).
    """

    def __init__(self, code, message, details=None, trailing_metadata=()):
        super().__init__(f"{code.name}: {message}")
        self.code = code
        self.message = message
        self.details = message if details is None else details
        self.trailing_metadata = tuple(trailing_metadata or ())

    @classmethod
    def from_rpc_error(cls, err):
        """From a grpc.RpcError (sync) or grpc.aio.AioRpcError."""
        code = err.code() if callable(getattr(err, "code", None)) else grpc.StatusCode.UNKNOWN
        details = err.details() if callable(getattr(err, "details", None)) else str(err)
        trailers = ()
        if callable(getattr(err, "trailing_metadata", None)):
            trailers = err.trailing_metadata() or ()
        return cls(code or grpc.StatusCode.UNKNOWN, details or "", details, trailers)

    def with_prefix(self, prefix):
        """The same error with `prefix: ` before its message (naming the operand)."""
        return GemmError(self.code, f"{prefix}: {self.message}", self.details,
                         self.trailing_metadata)


class InvalidArgumentError(GemmError, ValueError):
    """Arguments refused by the client before anything was sent: a GemmError
    with code INVALID_ARGUMENT that is also a ValueError."""

    def with_prefix(self, prefix):
        return InvalidArgumentError(self.code, f"{prefix}: {self.message}", self.details,
                                    self.trailing_metadata)


def invalid_argument(message):
    return InvalidArgumentError(grpc.StatusCode.INVALID_ARGUMENT, message)

"""Errors of the spattn client: every failed RPC raises a SpattnError carrying its gRPC status.

The worker's INVALID_ARGUMENT messages name the field first (`q.desc.shape[0]: 100 does not
match ...`); stream failures are prefixed `stream message N (layer L): ` (N counts from 1). Both are parsed into
attributes so callers can react without matching strings.
"""
import re

import grpc

_STREAM_PREFIX = re.compile(r"^stream message (\d+) \(layer (\d+)\): ")
# A field path: identifiers joined by dots, optional [index] parts; then ": " (`q.desc.shape[0]:
# 100 does not match`), or a space when the path is dotted/indexed (`method_override.
# vertical_slash.last_q must be > 0`).
_PATH = r"[A-Za-z_][A-Za-z0-9_]*(?:\[\d+\])*(?:\.[A-Za-z_][A-Za-z0-9_]*(?:\[\d+\])*)*"
_FIELD = re.compile(r"^(" + _PATH + r"): ")
_DOTTED_FIELD = re.compile(r"^(" + _PATH + r") ")


class SpattnError(Exception):
    """A failed call. `code` is a grpc.StatusCode, `details` the server's message, `field` the
    request field it names (or None), `stream_message`/`layer` where a stream message failed."""

    def __init__(self, code, details, rpc=None):
        self.code = code
        self.details = details or ""
        self.rpc = rpc
        self.stream_message = None
        self.layer = None
        rest = self.details
        m = _STREAM_PREFIX.match(rest)
        if m:
            self.stream_message = int(m.group(1))
            self.layer = int(m.group(2))
            rest = rest[m.end():]
        f = _FIELD.match(rest)
        if not f:
            f = _DOTTED_FIELD.match(rest)
            if f and not any(c in f.group(1) for c in ".["):
                f = None
        self.field = f.group(1) if f else None
        name = code.name if isinstance(code, grpc.StatusCode) else str(code)
        super().__init__(f"{rpc + ': ' if rpc else ''}{name}: {self.details}")


class InvalidArgumentError(SpattnError):
    pass


class NotFoundError(SpattnError):
    pass


class FailedPreconditionError(SpattnError):
    pass


class ResourceExhaustedError(SpattnError):
    pass


class UnavailableError(SpattnError):
    pass


class DeadlineExceededError(SpattnError):
    pass


class AbortedError(SpattnError):
    pass


class DataLossError(SpattnError):
    pass


class PermissionDeniedError(SpattnError):
    pass


class UnauthenticatedError(SpattnError):
    pass


_BY_CODE = {
    grpc.StatusCode.INVALID_ARGUMENT: InvalidArgumentError,
    grpc.StatusCode.NOT_FOUND: NotFoundError,
    grpc.StatusCode.FAILED_PRECONDITION: FailedPreconditionError,
    grpc.StatusCode.RESOURCE_EXHAUSTED: ResourceExhaustedError,
    grpc.StatusCode.UNAVAILABLE: UnavailableError,
    grpc.StatusCode.DEADLINE_EXCEEDED: DeadlineExceededError,
    grpc.StatusCode.ABORTED: AbortedError,
    grpc.StatusCode.DATA_LOSS: DataLossError,
    grpc.StatusCode.PERMISSION_DENIED: PermissionDeniedError,
    grpc.StatusCode.UNAUTHENTICATED: UnauthenticatedError,
}


def from_rpc_error(err, rpc=None):
    """grpc.RpcError -> the matching SpattnError subclass."""
    code = err.code() if hasattr(err, "code") else grpc.StatusCode.UNKNOWN
    details = err.details() if hasattr(err, "details") else str(err)
    return _BY_CODE.get(code, SpattnError)(code, details, rpc)

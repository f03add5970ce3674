"""Exceptions fluxfs raises, and the mapping from GCS HTTP answers to them.

Callers get the built-in exception a Python user expects (FileNotFoundError,
PermissionError, FileExistsError) with a message naming the bucket and object; the types
below are fluxfs's own, for what no built-in says (all are OSError subclasses).
"""
from __future__ import annotations

import json

__all__ = ["FluxError", "HttpError", "RetryableError", "PreconditionFailed", "RequestTimeout",
           "ChecksumMismatch", "raise_for_status"]


class FluxError(IOError):
    """Base class for fluxfs-specific failures."""


class HttpError(FluxError):
    """An HTTP answer fluxfs could not use; `status` holds the code."""

    def __init__(self, status: int, message: str, *, retry_after: float | None = None):
        super().__init__(f"HTTP {status}: {message}")
        self.status = status
        self.message = message
        self.retry_after = retry_after

    def __reduce__(self):
        return type(self), (self.status, self.message)


class RetryableError(HttpError):
    """A transient answer (408, 429, 5xx) that a retry may cure."""


class PreconditionFailed(HttpError):
    """412: the object's generation is not the one the request was pinned to."""


class RequestTimeout(FluxError):
    """No answer (or a stalled body) within `read_timeout`; an OSError, not TimeoutError, so
    fsspec's sync wrappers keep the message instead of re-raising a bare FSTimeoutError."""


class ChecksumMismatch(FluxError):
    """Bytes received or stored do not match their crc32c: never returned to the caller."""


RETRYABLE_STATUSES = frozenset({408, 429, 500, 502, 503, 504})


def error_message(body: bytes) -> str:
    """The human part of a GCS error body (JSON or XML), or the raw text."""
    text = body.decode("utf-8", "replace") if body else ""
    try:
        return json.loads(text)["error"]["message"]
    except (ValueError, KeyError, TypeError):
        pass
    start = text.find("<Message>")
    if start >= 0:
        end = text.find("</Message>", start)
        return text[start + len("<Message>") : end]
    return text.strip()[:500]


def raise_for_status(status: int, body: bytes, what: str, headers=None) -> None:
    """Raise the exception a user expects for a non-2xx answer about `what` ("bucket/key")."""
    if status < 400:
        return
    msg = error_message(body)
    detail = f"{what}: {msg}" if msg else what
    if status == 404:
        raise FileNotFoundError(f"No such object or bucket: {detail}")
    if status in (401, 403):
        raise PermissionError(f"Permission denied (HTTP {status}) for {detail}")
    if status == 412:
        raise PreconditionFailed(status, detail)
    if status in RETRYABLE_STATUSES:
        retry_after = None
        if headers is not None and headers.get("Retry-After"):
            try:
                retry_after = float(headers["Retry-After"])
            except ValueError:
                retry_after = None
        raise RetryableError(status, detail, retry_after=retry_after)
    if status == 416:
        raise ValueError(f"Requested range not satisfiable for {detail}")
    raise HttpError(status, detail)

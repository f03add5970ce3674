"""Exceptions fluxfs raises, and the mapping from GCS HTTP answers to them.

Callers get the built-in exception a Python user expects (FileNotFoundError,
PermissionError, FileExistsError) with a message naming the bucket and object; the types
below are fluxfs's own, for what no built-in says (all are OSError subclasses).
"""
from __future__ import annotations

import re

import aiohttp
from gcsfs.retry import NonRetryableError

from . import jsontext

__all__ = ["FluxError", "HttpError", "RetryableError", "PreconditionFailed", "ObjectChanged", "object_changed",
           "AppendTakenOver",
           "RequestTimeout",
           "ChecksumMismatch", "ServerUnreachable", "UploadLost", "ResumeImpossible",
           "TakenOverWhileResuming", "ZonalUnsupported",
           "FolderRenameTimeout", "UnknownOptionWarning", "raise_for_status"]


class FluxError(IOError):
    """Base class for fluxfs-specific failures."""


class UnknownOptionWarning(UserWarning):
    """A keyword argument `FluxFileSystem` ignores, as gcsfs does: no option of fluxfs, gcsfs or fsspec."""


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


class ObjectChanged(PreconditionFailed, FileNotFoundError):
    """A read pinned to a generation found it gone: the object was overwritten or deleted since it was
    first read. Both a PreconditionFailed and a FileNotFoundError, the two types such reads raised before,
    so existing handlers keep catching it; `path` ("bucket/key") and `generation` name what vanished."""

    def __init__(self, message: str, path: str | None = None, generation: str | None = None):
        HttpError.__init__(self, 412, message)
        self.args = (message,)
        self.path, self.generation = path, generation

    def __str__(self) -> str:
        return self.message

    def __reduce__(self):
        return type(self), (self.message, self.path, self.generation)


def object_changed(what: str, generation: str | None) -> ObjectChanged:
    """The error for a read pinned to `generation` of `what` ("bucket/key") that found it gone."""
    return ObjectChanged(f"{what}#{generation} changed while being read: generation {generation} no longer exists "
                         "(overwritten or deleted)", what, generation)


class AppendTakenOver(HttpError):
    """409: another writer took an appendable (zonal) object over while this append was being written. Its first
    `persisted` bytes are in the object, none after them: a retry resends only what follows them. An HttpError
    with status 409, as such failures were before; `path` ("bucket/key") names the object."""

    def __init__(self, message: str, path: str | None = None, persisted: int = 0):
        HttpError.__init__(self, 409, message)
        self.args = (message,)
        self.path, self.persisted = path, persisted

    def __str__(self) -> str:
        return self.message

    def __reduce__(self):
        return type(self), (self.message, self.path, self.persisted)


class RequestTimeout(FluxError):
    """No answer (or a stalled body) within `read_timeout`; an OSError, not TimeoutError, so
    fsspec's sync wrappers keep the message instead of re-raising a bare FSTimeoutError."""


class ServerUnreachable(FluxError, ConnectionError, aiohttp.ClientError, NonRetryableError):
    """No connection to the endpoint at all (refused, name not resolved) after a short retry: the
    message names the endpoint and how to set it. A ConnectionError, so code catching that sees it;
    an aiohttp.ClientError, so aiohttp passes it through unwrapped; and gcsfs's NonRetryableError, so
    gcsfs's own retry loop does not start its ~30 s of retries over again."""


class UploadLost(FluxError):
    """The server no longer knows the multipart upload or resumable session a write was using (it
    restarted, the session expired, or `fluxfs cleanup` / `abort_incomplete_uploads` aborted it):
    nothing was written."""


class ChecksumMismatch(FluxError):
    """Bytes received or stored do not match their crc32c: never returned to the caller."""


class ResumeImpossible(FluxError):
    """A broken write stream cannot be resumed without writing wrong bytes (the object is not where we left it)."""


class TakenOverWhileResuming(AppendTakenOver, ResumeImpossible):
    """A broken write stream, resumed, found another writer's bytes past its confirmed ones: a takeover whose abort
    reached this stream as another status (gRPC may report a refused stream as INTERNAL). Handled as the takeover
    it is (`persisted` counted from this stream's last confirmed size; the object left to that writer)."""


class ZonalUnsupported(FluxError, NotImplementedError):
    """An operation that needs compose (append "ab", merge) on a zonal (Rapid) bucket, where GCS has none;
    a NotImplementedError as well, as fsspec says of what a filesystem cannot do."""


class FolderRenameTimeout(FluxError, TimeoutError):
    """A folder rename's long-running operation not done within the wait (it may still complete)."""


RETRYABLE_STATUSES = frozenset({408, 429, 500, 502, 503, 504})


# Longest message kept: a server that answers with a whole HTML page or a stack trace is cut here.
MAX_MESSAGE = 500


def error_message(body: bytes) -> str:
    """The human part of an error body, as one line: GCS's JSON (``error.message``, else the first
    ``error.errors[].message``) or XML (``<Message>``), other servers' shapes (``{"error": "text"}``,
    ``{"message": ...}``, a message that is itself JSON-encoded), an HTML page's title, or the raw text."""
    text = body.decode("utf-8", "replace") if isinstance(body, (bytes, bytearray)) else str(body or "")
    return _one_line(_message_of(text.strip()))


def _message_of(text: str, depth: int = 0) -> str:
    if text[:1] in ("{", '"') and depth < 3:
        try:
            doc = jsontext.loads(text)
        except ValueError:
            doc = None
        if doc is not None:
            found = _json_message(doc)
            if found is None and isinstance(doc, dict) and "error" in doc:
                return ""  # an error object without a message: the status says it all
            if found is not None:
                found = found.strip()
                # A message that is itself JSON (a proxy wrapping the backend's answer): unwrap it.
                return _message_of(found, depth + 1) if found[:1] in ("{", '"') else found
    for tag in ("Message", "Details", "title"):   # GCS's XML API; an HTML error page
        start = text.find(f"<{tag}>")
        if start >= 0:
            end = text.find(f"</{tag}>", start)
            return text[start + len(tag) + 2 : end if end >= 0 else None]
    if text[:1] == "<":
        return re.sub(r"<[^>]*>", " ", text)
    return text


def _json_message(doc) -> str | None:
    """The message in a parsed JSON error body, or None when it has none we know."""
    if isinstance(doc, str):
        return doc
    if not isinstance(doc, dict):
        return None
    err = doc.get("error")
    if isinstance(err, str):
        # {"error": "invalid_grant", "error_description": "..."} (OAuth) or {"error": "text"}
        desc = doc.get("error_description") or doc.get("message")
        return f"{err}: {desc}" if isinstance(desc, str) and desc else err
    if isinstance(err, dict):
        msg = err.get("message")
        if isinstance(msg, str) and msg.strip():
            return msg
        for item in err.get("errors") or []:
            if isinstance(item, dict) and isinstance(item.get("message"), str) and item["message"].strip():
                return item["message"]
        if isinstance(err.get("status"), str):
            return err["status"]
    for key in ("message", "msg", "detail", "error_description"):
        if isinstance(doc.get(key), str) and doc[key].strip():
            return doc[key]
    return None


def _one_line(msg: str) -> str:
    """Whitespace runs (newlines included) as one space, cut to MAX_MESSAGE characters."""
    msg = " ".join(msg.split())
    return msg if len(msg) <= MAX_MESSAGE else msg[: MAX_MESSAGE - 3] + "..."


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


def from_download(exc: BaseException, what: str, lpath: str) -> BaseException | None:
    """What a failed download of `what` to the local `lpath` raises, or None when `exc` is already that: a local
    I/O error names the file ("No space left on device" alone does not say which disk), and the server's answer
    (gcsfs's GET bypasses its `_call`) has fluxfs's type, as `from_gcsfs` gives it."""
    if isinstance(exc, OSError) and exc.errno is not None:  # local I/O
        return None if exc.filename is not None else OSError(exc.errno, exc.strerror, lpath)
    return from_gcsfs(exc, what)


def from_gcsfs(exc: BaseException, what: str, create_only: bool = False) -> BaseException | None:
    """The exception fluxfs raises for an HTTP error gcsfs raised about `what`, or None when gcsfs's is
    already that one (FileNotFoundError, ValueError). gcsfs answers 403 with a bare OSError("Forbidden"),
    412 with FileExistsError, 502 with requests' ProxyError and other codes with its own HttpError;
    `create_only`: the request had ifGenerationMatch=0, whose 412 means the object exists."""
    import requests.exceptions
    from gcsfs.retry import HttpError as GcsfsHttpError

    if isinstance(exc, GcsfsHttpError) and isinstance(exc.code, int):
        message = str(exc.message or "").removesuffix(f", {exc.code}")
        status, body = exc.code, message.encode()
    elif type(exc) is OSError and str(exc).startswith("Forbidden"):
        status, body = 403, str(exc).partition("\n")[2].encode()
    elif type(exc) is FileExistsError and not create_only:
        status, body = 412, b"the object's generation did not match the request's precondition"
    elif type(exc) is FileExistsError:
        return FileExistsError(f"Object already exists: {what}")
    elif isinstance(exc, requests.exceptions.ProxyError):
        status, body = 502, b"Bad Gateway"
    else:
        return None
    try:
        raise_for_status(status, body, what)
    except Exception as mapped:  # the mapped exception is returned, raised by the caller
        return mapped
    return None

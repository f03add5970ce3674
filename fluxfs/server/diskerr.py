"""A write under ``--root`` that the disk refused (full, read-only, not permitted) as a ServerError.

Answered 507 Insufficient Storage: no client retries it (gcsfs, google-cloud-storage and fluxfs
retry 408, 429, 500, 502-504), since retrying cannot free the server's disk; the message, which
clients print, says what the server's disk said. Before, such a write was a bare 500 retried 12 times.
"""
from __future__ import annotations

import contextlib
import errno
from typing import Iterator

from .errors import ServerError

INSUFFICIENT_STORAGE = 507


def disk_error(exc: OSError, what: str) -> ServerError:
    """The answer to a write of `what` (an object "bucket/name", a part, a session) that failed with `exc`."""
    why = exc.strerror or str(exc)
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        msg = f"The server's disk is full: cannot store {what} under its --root ({why}); free space there"
    elif exc.errno == errno.EROFS:
        msg = f"The server's --root is on a read-only file system: cannot store {what} ({why})"
    elif exc.errno in (errno.EACCES, errno.EPERM):
        msg = f"The server may not write under its --root: cannot store {what} ({why}); check its permissions"
    else:
        msg = f"The server could not write {what} under its --root: {why} (errno {exc.errno})"
    return ServerError(INSUFFICIENT_STORAGE, msg + ".", "insufficientStorage", "InsufficientStorage")


def is_disk_error(exc: BaseException) -> bool:
    """An OSError from the file system, not from the network (a client gone, a timeout)."""
    return isinstance(exc, OSError) and not isinstance(exc, (ConnectionError, TimeoutError))


@contextlib.contextmanager
def disk_writes(what: str) -> Iterator[None]:
    """Turn a file system error inside the block into the 507 answer naming `what`."""
    try:
        yield
    except OSError as e:
        if not is_disk_error(e):
            raise
        raise disk_error(e, what) from e

"""The node-local cache's warnings: a directory that cannot take a write, a damaged index; each once per cache.

A full disk, a read-only mount, no permission, a link planted under a fixed name (O_NOFOLLOW), a lock held
without progress: the read goes on from storage, complete entries are still served, and one warning says so
(logged and a RuntimeWarning), not one per read.
"""
from __future__ import annotations

import errno
import logging
import os
import sqlite3
import warnings

from .index import INDEX

log = logging.getLogger("fluxfs.cache")

NO_SPACE = (errno.ENOSPC, errno.EDQUOT)
UNWRITABLE = NO_SPACE + (errno.EROFS, errno.EACCES, errno.EPERM, errno.ELOOP, errno.ETIMEDOUT)


class Warnings:
    """The warnings of the cache in `directory`, each kind given once."""

    def __init__(self, directory: str):
        self.directory = directory
        self.given: set[str] = set()

    def once(self, kind: str, msg: str) -> None:
        if kind not in self.given:
            self.given.add(kind)
            log.warning(msg)
            warnings.warn(msg, RuntimeWarning, stacklevel=6)

    def full(self, exc: OSError) -> None:
        """The directory cannot take a write (full, read-only, not permitted, a planted link, a stalled lock)."""
        if exc.errno in NO_SPACE or exc.errno is None:
            tail = "objects that do not fit are read from storage without caching"
        else:
            where = f" ({os.path.basename(exc.filename)})" if isinstance(exc.filename, str) else ""
            tail = (f"objects are read from storage without caching meanwhile{where} (complete entries are still "
                    "served)")
        self.once("full", f"fluxfs node-local cache {self.directory}: {exc.strerror or exc}; {tail}")

    def index(self, exc: sqlite3.Error) -> None:
        """The index of packed entries failed: a full disk warns as one; a damaged index warns once."""
        if "full" in str(exc):
            return self.full(OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)))
        if isinstance(exc, sqlite3.OperationalError):
            log.warning("fluxfs node-local cache %s: index: %s", self.directory, exc)  # locked too long, ...
        else:
            self.once("index", f"fluxfs node-local cache {self.directory}: its index {INDEX} cannot be read ({exc}); "
                               "small objects are read from storage without caching until `fluxfs cache clear` "
                               "removes it")
        return None

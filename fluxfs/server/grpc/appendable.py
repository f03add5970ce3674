"""Appendable objects not yet finalized: one record per (bucket, name) holding the generation being appended
to, its persisted size, crc32c and md5, and a write handle. The object itself lives in the store like any
other, with its persisted size, so the JSON and XML APIs list and read it up to that size; finalizing drops
the record, leaving a normal object.

In memory the record keeps the persisted bytes (the object's body). Under ``--root`` the body is the object's
file: a stream writes what it receives straight to the file's tail (`Unflushed`), and a flush makes it
persisted (fsync, then the metadata's size), so no copy of the object is held in memory and each byte is
written once (a flush never rewrites the file).
"""
from __future__ import annotations

import hashlib
import os
import time
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

import grpc

from ...gcs.checksums import crc_to_b64, extend
from ...gcs.chunks import Chunked
from ..diskerr import disk_writes
from ..objects import Obj, b64
from .status import RpcError


@dataclass
class Appendable:
    """An unfinalized appendable object: `chunks` hold its persisted bytes (what the store's object shows;
    empty under --root, where the object's file holds them)."""

    bucket: str
    name: str
    generation: int
    chunks: List[bytes] = field(default_factory=list)
    size: int = 0
    crc: int = 0
    epoch: int = 0  # bumped by each takeover: an older stream's further writes are refused
    md5: Any = field(default_factory=hashlib.md5)  # of the persisted bytes, as they come (finalize needs no pass)

    @property
    def handle(self) -> bytes:
        return f"{self.bucket}/{self.name}#{self.generation}".encode("utf-8", "surrogateescape")


def registry(srv: Any) -> Dict[Tuple[str, str], Appendable]:
    """The server's unfinalized appendable objects."""
    reg = srv.__dict__.get("_appendables")
    if reg is None:
        reg = srv.__dict__["_appendables"] = {}
    return reg


def is_unfinalized(srv: Any, bucket: str, obj: Obj) -> bool:
    """Whether `obj` is an appendable object still open for appends."""
    rec = srv.__dict__.get("_appendables", {}).get((bucket, obj.name))
    return rec is not None and rec.generation == obj.generation


def current(srv: Any, rec: Appendable) -> Obj:
    """The store's object `rec` appends to; FAILED_PRECONDITION once it was replaced or deleted meanwhile."""
    obj = srv.store.bucket(rec.bucket).objects.get(rec.name)
    if obj is None or getattr(obj, "generation", None) != rec.generation:
        registry(srv).pop((rec.bucket, rec.name), None)
        raise RpcError(grpc.StatusCode.FAILED_PRECONDITION,
                       f"Appendable object {rec.bucket}/{rec.name} generation {rec.generation} was replaced or "
                       "deleted while being appended to.")
    return obj


class Unflushed:
    """What one stream received past the persisted size, not yet flushed: in memory, or (under --root) already
    in the body file past the object's size (invisible to reads, overwritten by the next stream if never
    flushed). `persist` makes it part of the object."""

    def __init__(self, srv: Any, rec: Appendable):
        self.srv, self.rec = srv, rec
        self.chunks: List[bytes] = []
        self.size = 0
        self.crc, self.md5 = rec.crc, rec.md5.copy()
        self.file: Any = None
        obj = current(srv, rec)
        if srv.store.persist and obj.path:  # opened once: a replaced object's file is never made again
            self.file = open(obj.path, "r+b")

    def add(self, data: bytes) -> None:
        self.crc = extend(self.crc, data)
        self.md5.update(data)
        if self.file is not None:
            with disk_writes(f"{self.rec.bucket}/{self.rec.name}"):
                os.pwrite(self.file.fileno(), data, self.rec.size + self.size)
        else:
            self.chunks.append(data)
        self.size += len(data)

    def persist(self) -> Obj:
        """Add what was received to the persisted bytes: the store's object then shows (and serves) them."""
        srv, rec = self.srv, self.rec
        obj = current(srv, rec)
        if not self.size:
            return obj
        if self.file is not None:
            with disk_writes(f"{rec.bucket}/{rec.name}"):
                os.fsync(self.file.fileno())
        else:
            rec.chunks.extend(self.chunks)
        rec.size, rec.crc, rec.md5 = rec.size + self.size, self.crc, self.md5
        self.chunks, self.size, self.md5 = [], 0, self.md5.copy()
        _show(srv, rec, obj)
        return obj

    def close(self) -> None:
        if self.file is not None:
            self.file.close()
            self.file = None


def _show(srv: Any, rec: Appendable, obj: Obj) -> None:
    obj.size, obj._crc, obj._md5 = rec.size, crc_to_b64(rec.crc), ""
    obj.updated = time.time()
    obj._json = None
    store = srv.store
    if store.persist and obj.path:  # --root: the bytes are in the body file already; its metadata says how many
        obj.data = None
        with disk_writes(f"{rec.bucket}/{rec.name}"):
            store.persist.save_meta(rec.bucket, obj)
    else:
        obj.data, obj.path = Chunked(list(rec.chunks)), None


def finalize(srv: Any, rec: Appendable, expect_crc: Optional[int]) -> Obj:
    """Finalize: INVALID_ARGUMENT (nothing changed, still appendable) if the client's full-object crc32c
    differs; else the record goes and the object is a normal one."""
    obj = current(srv, rec)
    if expect_crc is not None and expect_crc != rec.crc:
        raise RpcError(grpc.StatusCode.INVALID_ARGUMENT,
                       f"Provided CRC32C {expect_crc} of {rec.bucket}/{rec.name} doesn't match calculated CRC32C "
                       f"{rec.crc} of its {rec.size} bytes; the object is still appendable.")
    registry(srv).pop((rec.bucket, rec.name), None)
    obj._md5 = b64(rec.md5.digest())  # hashed as the bytes came, as a streaming upload's are
    obj.updated = time.time()
    obj._json = None
    if srv.store.persist:
        with disk_writes(f"{rec.bucket}/{rec.name}"):
            if obj.path and os.path.getsize(obj.path) > rec.size:  # a broken stream's unflushed bytes
                os.truncate(obj.path, rec.size)
            srv.store.persist.save_meta(rec.bucket, obj)
    return obj

"""Appendable objects not yet finalized: one record per (bucket, name) holding the generation being appended
to, its persisted bytes and a write handle. The object itself lives in the store like any other, with its
persisted size, so the JSON and XML APIs list and read it up to that size; finalizing drops the record,
leaving a normal object."""
from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

import google_crc32c
import grpc

from ...gcs.checksums import crc_to_b64
from ...gcs.chunks import Chunked
from ..objects import Obj, b64
from .status import RpcError


@dataclass
class Appendable:
    """An unfinalized appendable object: `chunks` hold its persisted bytes (what the store's object shows)."""

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


def persist(srv: Any, rec: Appendable, pending: List[bytes]) -> Obj:
    """Add `pending` to the persisted bytes: the store's object then shows (and serves) them."""
    obj = current(srv, rec)
    if not pending:
        return obj
    for piece in pending:
        rec.crc = google_crc32c.extend(rec.crc, piece)
        rec.md5.update(piece)
        rec.size += len(piece)
    rec.chunks.extend(pending)
    _show(srv, rec, obj)
    return obj


def _show(srv: Any, rec: Appendable, obj: Obj) -> None:
    body = Chunked(list(rec.chunks))
    obj.size, obj._crc, obj._md5 = rec.size, crc_to_b64(rec.crc), ""
    obj.updated = time.time()
    obj._json = None
    store = srv.store
    if store.persist:  # --root: the body file rewritten whole (appends are small; the record keeps the chunks)
        obj.data, obj.path = bytes(body), None
        store.persist.save_object(rec.bucket, obj)
    else:
        obj.data, obj.path = body, None


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
        srv.store.persist.save_meta(rec.bucket, obj)
    return obj

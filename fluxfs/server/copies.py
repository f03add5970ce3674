"""Objects made from other objects' bodies (copy, rewrite, move, compose, an XML copy-source PUT).

In memory the new body shares or joins the sources'; with ``--root`` it is written to a file of its
own a MiB at a time (never a whole body in memory), and a full disk answers 507 leaving nothing behind.
"""
from __future__ import annotations

from typing import Any, List

from ..gcs.chunks import Chunked
from .objects import Obj
from .spool import Spooled, assemble, read_pieces


def _pieces(obj: Obj) -> list:
    """An in-memory body as the pieces it is stored in (views, not copies)."""
    if obj.data.__class__ is Chunked:
        return list(obj.data.chunks)
    return [obj.read()]


def put_copy(srv, bucket: str, name: str, sources: List[Obj], **put: Any) -> Obj:
    """Store `bucket/name` with the bodies of `sources` one after another (`put`: Store.put's options)."""
    where = srv.store.spool_dir(bucket)
    if where is None:
        body = bytes(sources[0].read()) if len(sources) == 1 else Chunked([p for o in sources for p in _pieces(o)])
    else:
        body = assemble(where, [read_pieces(o) for o in sources], f"{bucket}/{name}",
                        md5=put.get("component_count") is None)
    try:
        return srv.store.put(bucket, name, body, **put)
    finally:
        if body.__class__ is Spooled:
            body.discard()  # renamed into place if stored

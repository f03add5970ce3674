"""Which objects of a batched read go through a temporary composite, and in which groups.

Pure: no I/O. A group holds up to 32 objects of one bucket (GCS's compose limit) and at most
`max_composite_size` bytes; the rest is read directly.
"""
from __future__ import annotations

import base64
import binascii

from typing import Callable, Iterable, Optional

from ..gcs.checksums import crc_from_b64
from ..gcs.limits import MAX_COMPOSE_SOURCES

# GCS composes at most 32 sources per call.


class ObjectRef:
    """One requested object: where it is, what listing said about it."""

    __slots__ = ("path", "bucket", "key", "size", "generation", "crc", "pinned", "listed")

    def __init__(self, path: str, bucket: str, key: str, size: Optional[int], generation: Optional[str],
                 crc: Optional[int], pinned: bool = False, listed: bool = False):
        self.path, self.bucket, self.key = path, bucket, key
        self.size, self.generation, self.crc = size, generation, crc
        self.pinned = pinned  # the caller named this generation ("key#generation"): read it, not the live one
        self.listed = listed  # pinned by the caller's listing (`cat_objects`): gone is ObjectChanged


def to_objs(infos: Iterable[dict], split: Optional[Callable] = None, pin: bool = False) -> list[ObjectRef]:
    """Info dicts (name "bucket/key", size, generation, crc32c) as `ObjectRef`, duplicates dropped.

    `split`: a version-aware filesystem's ``split_path``, so a name "bucket/key#generation" reads that generation.
    `pin`: an info dict's generation is the one read (`cat_objects`: a listing is one consistent view, as the
    node-local cache serves it); else the live object is (`cat` of paths, whose metadata is only a hint).
    """
    seen: set[str] = set()
    out = []
    for info in infos:
        if isinstance(info, str):
            info = {"name": info}  # a bare path: no listing info, read directly
        elif not isinstance(info, dict) or "name" not in info:
            raise ValueError(f"cat_objects takes info dicts with a 'name' ('bucket/key'), not {info!r}")
        name = info["name"]
        if "://" in name:  # "flux://bucket/key" or "gs://bucket/key": results are keyed "bucket/key"
            name = name.split("://", 1)[1]
        if name in seen:
            continue
        seen.add(name)
        bucket, _, key = name.partition("/")
        if not key:
            raise ValueError(f"object info needs a name 'bucket/key', got {name!r}")
        gen = info.get("generation")
        named = split(name)[2] if split is not None else None
        if named:
            bucket, key, _ = split(name)
            gen = named
        gen = str(gen) if gen not in (None, "") else None
        listed = bool(pin and gen and not named)
        out.append(ObjectRef(name, bucket, key, _size(name, info.get("size")), gen, _crc(name, info.get("crc32c")),
                             pinned=bool(named) or listed, listed=listed))
    return out


def _size(name: str, size) -> int | None:
    """An info dict's size, or ValueError naming the object and the field."""
    if size is None:
        return None
    try:
        if isinstance(size, bool) or int(size) != float(size) or int(size) < 0:
            raise ValueError
        return int(size)
    except (TypeError, ValueError):
        raise ValueError(f"object info for {name}: 'size' must be a whole number of bytes, not {size!r}") from None


def _crc(name: str, crc) -> int | None:
    """An info dict's crc32c (GCS's base64 of 4 bytes), or ValueError naming the object and the field."""
    if crc is None or crc == "":
        return None
    try:
        raw = base64.b64decode(crc, validate=True)
        if len(raw) != 4:
            raise ValueError
        return crc_from_b64(crc)
    except (TypeError, ValueError, binascii.Error):
        raise ValueError(f"object info for {name}: 'crc32c' must be GCS's base64 text of 4 bytes "
                         f"(like 'yZRlqg=='), not {crc!r}") from None


def plan(objs: list[ObjectRef], cap: int, threshold: int) -> tuple[list[list[ObjectRef]], list[ObjectRef]]:
    """Split into composite groups (<= 32 sources, <= cap bytes, never over) and direct reads.

    Objects without size, generation or crc32c, above `threshold`, and groups of one are read
    directly. The crc32c is required because it is what checks each slice: a server that ignores
    the generation pins (fake-gcs-server) would otherwise hand back misaligned slices unnoticed
    when one object grows as another shrinks. Consecutive objects of one bucket share a group,
    so input order keeps data locality.
    """
    groups: list[list[ObjectRef]] = []
    direct: list[ObjectRef] = []
    open_groups: dict[str, tuple[list[ObjectRef], int]] = {}
    for o in objs:
        if o.size is None or o.generation is None or o.crc is None or o.size > threshold:
            direct.append(o)
            continue
        cur, total = open_groups.get(o.bucket, (None, 0))
        if cur is None or len(cur) >= MAX_COMPOSE_SOURCES or total + o.size > cap:
            cur, total = [], 0
            groups.append(cur)
        cur.append(o)
        open_groups[o.bucket] = (cur, total + o.size)
    singles = [g[0] for g in groups if len(g) == 1]
    return [g for g in groups if len(g) > 1], direct + singles

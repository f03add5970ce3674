"""Tar archives crafted with `tarfile`'s own headers, and what `tarfile` reads from them (the reference)."""
from __future__ import annotations

import io
import tarfile

from fluxfs.pipes.shards.tarformat import Member


def header(name: str, size: int, *, fmt=tarfile.PAX_FORMAT, pax: dict | None = None, type=tarfile.REGTYPE,
           linkname: str = "") -> bytes:
    info = tarfile.TarInfo(name)
    info.size, info.type, info.linkname = size, type, linkname
    if pax:
        info.pax_headers = dict(pax)
    return info.tobuf(format=fmt, encoding="utf-8", errors="surrogateescape")


def data_blocks(data: bytes) -> bytes:
    return data + b"\0" * (-len(data) % 512)


def extended(kind: bytes, payload: bytes) -> bytes:
    """A bare extended header (pax x/g records, GNU L/K name) of type `kind`, with its padded data."""
    info = tarfile.TarInfo("././@Extended")
    info.type, info.size = kind, len(payload)
    return info.tobuf(format=tarfile.USTAR_FORMAT) + data_blocks(payload)


def pax(**records: str) -> bytes:
    out = b""
    for key, value in records.items():
        body = f" {key}={value}\n".encode()
        n = len(body) + 1
        n = len(body) + len(str(n))
        n = len(body) + len(str(n))
        out += str(n).encode() + body
    return out


def reference(data: bytes) -> list[tuple[Member, bytes]]:
    """Each member `tarfile` gives bytes for (regular files, unknown types), with those bytes."""
    out = []
    with tarfile.open(fileobj=io.BytesIO(data)) as tf:
        for info in tf.getmembers():
            if info.isreg() or info.type not in tarfile.SUPPORTED_TYPES:
                out.append((Member(info.name, info.offset_data, info.size), tf.extractfile(info).read()))
    return out


def end() -> bytes:
    return b"\0" * 1024

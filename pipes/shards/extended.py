"""Tar's extended headers as `tarfile` reads them: pax records (``x`` per file, ``g`` global) and GNU long names.

An extended header describes the member header that follows it. When several precede one member,
`tarfile` applies the nearest first and the farthest last, so the first one in the archive wins;
`Pending.apply` does the same. Of the records, those that change what a reader gets are `path`
and `size` (`linkpath` and GNU ``K`` long link names only concern links, which carry no data).
GNU sparse members are refused: `tarfile` rebuilds their holes, a byte range cannot.
"""
from __future__ import annotations

import re
import tarfile
from .errors import ShardError

_RECORD_LENGTH = re.compile(rb"([0-9]{1,20}) ")


def nts(raw: bytes) -> str:
    """A NUL-terminated name as `tarfile` decodes it (up to the first NUL; UTF-8, undecodable bytes escaped)."""
    end = raw.find(b"\0")
    return (raw if end < 0 else raw[:end]).decode("utf-8", "surrogateescape")


def pax_records(raw: bytes, shard: str, offset: int) -> dict[str, str]:
    """The "LEN key=value\\n" records of a pax header, checked as `tarfile` checks them; later ones win."""
    out: dict[str, str] = {}
    pos = 0
    while pos < len(raw) and raw[pos] != 0:
        match = _RECORD_LENGTH.match(raw, pos)
        length = int(match.group(1)) if match else 0
        end = pos + length - 1  # the record's closing newline
        if length < 5 or end >= len(raw) or raw[end] != 0x0A:
            raise ShardError(shard, offset, f"malformed pax header (record at byte {pos} of it)")
        key, eq, value = raw[match.end():end].partition(b"=")  # type: ignore[union-attr]
        if not key or not eq:
            raise ShardError(shard, offset, f"malformed pax header (record at byte {pos} of it)")
        out[key.decode("utf-8", "surrogateescape")] = value.decode("utf-8", "surrogateescape")
        pos += length
    return out


def _size(value: str, shard: str, offset: int) -> int:
    if not value.isascii() or not value.isdigit():
        raise ShardError(shard, offset, f"pax size record {value!r} is not a byte count")
    return int(value)


def _refuse_sparse(records: dict[str, str], shard: str, offset: int) -> None:
    if any(k.startswith("GNU.sparse.") for k in records):
        raise ShardError(shard, offset, "a GNU sparse member: sparse files are not supported (tarfile fills in "
                                        "their holes, a byte range cannot); pack the file without --sparse")


class Pending:
    """The global pax records so far and the extended headers waiting for their member."""

    def __init__(self, shard: str):
        self.shard = shard
        self.globals: dict[str, str] = {}
        self.headers: list[tuple[bytes, object]] = []  # (type, records dict or long name)

    def __bool__(self) -> bool:
        return bool(self.headers)

    def add(self, kind: bytes, raw: bytes, offset: int) -> None:
        """Take the data of the extended header of type `kind` at `offset`."""
        if kind == tarfile.GNUTYPE_LONGNAME:
            self.headers.append((kind, nts(raw)))
        elif kind == tarfile.GNUTYPE_LONGLINK:
            self.headers.append((kind, None))  # a link's target: links are skipped
        else:
            records = pax_records(raw, self.shard, offset)
            _refuse_sparse(records, self.shard, offset)
            if "size" in records:
                _size(records["size"], self.shard, offset)
                if kind == tarfile.XGLTYPE:
                    raise ShardError(self.shard, offset, "a global pax header sets 'size' for every later member; "
                                                         "tar readers disagree on where their data ends: refused")
            if kind == tarfile.XGLTYPE:
                self.globals.update(records)
            else:  # tarfile gives each x header a copy of the global records, its own on top
                self.headers.append((kind, {**self.globals, **records}))

    def apply(self, info: tarfile.TarInfo, data_at: int, has_data: bool, offset: int) -> tuple[str, int, int]:
        """(name, size, next header's offset) of the member whose ustar header `info` is at `offset`."""
        if info.type == tarfile.GNUTYPE_SPARSE:
            _refuse_sparse({"GNU.sparse.type": "S"}, self.shard, offset)
        name, size = info.name, info.size
        next_header = data_at + (_padded(size) if has_data else 0)
        if "path" in self.globals:
            name = self.globals["path"].rstrip("/")
        for kind, value in reversed(self.headers):
            if kind == tarfile.GNUTYPE_LONGNAME:
                name = value  # type: ignore[assignment]
            elif isinstance(value, dict):
                if "path" in value:
                    name = value["path"].rstrip("/")
                if "size" in value:
                    size = _size(value["size"], self.shard, offset)
                    next_header = data_at + (_padded(size) if has_data else 0)
        self.headers = []
        return name, size, next_header


def _padded(size: int) -> int:
    return -(-size // 512) * 512

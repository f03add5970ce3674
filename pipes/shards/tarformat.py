"""POSIX tar members, written and parsed incrementally, so shards stream in and out without a file.

Headers are made and checked by the standard library's `tarfile` (ustar, with pax records for long
or non-ASCII names), so what we write is what `tar` and every tar reader expect. The parser takes
bytes as they arrive (from ranged GETs) and reports each regular file's name, data offset and size.
"""
from __future__ import annotations

import tarfile
from dataclasses import dataclass
from typing import Iterator

from .errors import ShardError
from .extended import Pending

BLOCK = 512
END_OF_ARCHIVE = b"\0" * (2 * BLOCK)
# Members whose header types carry a file's bytes (as tarfile: regular files, and any type it does not know);
# directories, links, devices and fifos are skipped.
_FILE_TYPES = (tarfile.REGTYPE, tarfile.AREGTYPE, tarfile.CONTTYPE)
_EXTENDED_TYPES = (tarfile.GNUTYPE_LONGNAME, tarfile.GNUTYPE_LONGLINK, tarfile.XHDTYPE, tarfile.SOLARIS_XHDTYPE,
                   tarfile.XGLTYPE)
# A pax or GNU long-name record this large is not a name: refuse it rather than buffer it.
_MAX_EXTENDED_HEADER = 1 << 20


@dataclass(frozen=True)
class Member:
    """A regular file in a tar shard: its name, where its data starts and how long it is."""

    name: str
    offset: int
    size: int

    @property
    def end(self) -> int:
        return self.offset + self.size


def padded(size: int) -> int:
    """`size` rounded up to whole 512-byte blocks (tar stores data that way)."""
    return -(-size // BLOCK) * BLOCK


def member_header(name: str, size: int, mtime: int = 0) -> bytes:
    """The header block(s) for a regular file `name` of `size` bytes (pax records when needed)."""
    info = tarfile.TarInfo(name)
    info.size = size
    info.mode = 0o644
    info.mtime = mtime
    info.type = tarfile.REGTYPE
    return info.tobuf(format=tarfile.PAX_FORMAT, encoding="utf-8", errors="strict")


def member_bytes(name: str, data: bytes | memoryview, mtime: int = 0) -> list[bytes | memoryview]:
    """Header, data and padding of one member, as pieces ready to write (the data is not copied)."""
    pad = padded(len(data)) - len(data)
    return [member_header(name, len(data), mtime), data, b"\0" * pad]


class TarScanner:
    """Walks tar headers from bytes fed in order; yields each member with data as `tarfile` reads it.

    Data bytes are skipped, not kept: feed it a whole shard to index it, or only the header
    blocks it asks for (`wanted`) when scanning with ranged reads.
    """

    def __init__(self, shard: str, start: int = 0):
        self.shard = shard
        self.start = start
        self.next_header = start  # absolute offset of the next header block
        self.ended = False
        self._buf = bytearray()
        self._buf_at = start
        self._pending = Pending(shard)

    @property
    def wanted(self) -> int:
        """Absolute offset of the next byte the scanner needs (data between headers can be skipped)."""
        return max(self.next_header, self._buf_at + len(self._buf))

    def feed(self, data: bytes | memoryview, at: int | None = None) -> list[Member]:
        """Take bytes starting at absolute offset `at` (default: where the last feed ended)."""
        at = self._buf_at + len(self._buf) if at is None else at
        if at > self._buf_at + len(self._buf):  # a gap: allowed only over member data
            if self._buf or at > self.next_header:
                raise ShardError(self.shard, self._buf_at + len(self._buf), "bytes missing before the next header")
            self._buf_at = at
        skip = self._buf_at + len(self._buf) - at
        if skip > 0:
            data = memoryview(data)[skip:]
        self._buf += data
        return list(self._parse())

    def finish(self, size: int) -> None:
        """Check the archive ended properly at `size` bytes (no member cut off; not empty, as tarfile says)."""
        if size == 0 and self.start == 0:
            raise ShardError(self.shard, 0, "empty object: not a tar shard (0 bytes)")
        if self.ended:
            return
        if self.next_header > size or self._pending:
            raise ShardError(self.shard, size, "truncated: the last member's data runs past the end of the object")
        if self.next_header < size and (self.next_header == 0 or any(self._buf[: size - self._buf_at])):
            raise ShardError(self.shard, self.next_header, "truncated header")
        # A tar whose end-of-archive blocks were dropped still holds complete members: accept it.
        self.ended = True

    def _parse(self) -> Iterator[Member]:
        while not self.ended:
            rel = self.next_header - self._buf_at
            if rel < 0:
                raise ShardError(self.shard, self.next_header, "scanner out of step")
            if rel > 0:  # skip data we do not keep
                drop = min(rel, len(self._buf))
                del self._buf[:drop]
                self._buf_at += drop
                if drop < rel:
                    return
            if len(self._buf) < BLOCK:
                return
            block = bytes(self._buf[:BLOCK])
            if not any(block):
                if self._pending:
                    raise ShardError(self.shard, self.next_header, "an extended header is not followed by a member")
                self.ended = True
                return
            try:
                info = tarfile.TarInfo.frombuf(block, "utf-8", "surrogateescape")
            except tarfile.HeaderError as e:
                raise ShardError(self.shard, self.next_header, f"not a tar header ({e})") from None
            data_at = self.next_header + BLOCK
            if info.type in _EXTENDED_TYPES:
                if info.size > _MAX_EXTENDED_HEADER:
                    raise ShardError(self.shard, self.next_header, f"extended header of {info.size} bytes")
                if len(self._buf) < BLOCK + info.size:
                    return
                self._pending.add(info.type, bytes(self._buf[BLOCK : BLOCK + info.size]), self.next_header)
                self.next_header = data_at + padded(info.size)
                continue
            has_data = info.type in _FILE_TYPES or info.type not in tarfile.SUPPORTED_TYPES
            name, size, self.next_header = self._pending.apply(info, data_at, has_data, self.next_header)
            if has_data:
                yield Member(name, data_at, size)


def scan(shard: str, data: bytes | memoryview) -> list[Member]:
    """Every regular file in a whole tar held in memory (checks it is complete)."""
    scanner = TarScanner(shard)
    members = scanner.feed(data)
    scanner.finish(len(data))
    return members

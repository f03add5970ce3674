"""Checks, as indexed samples are read, that the index still describes its shard.

An index whose size and generation match its shard can still disagree with it (built for another
shard of the same size, on a filesystem without generations; edited; written by a tool that erred):
samples would come out under the wrong key, or be dropped, silently. So reads of indexed samples
start at the header blocks before their first member (one 512-byte block for most members), and the
read of a shard's last sample goes on to the shard's end: the headers there must announce exactly the
members the index lists, as `TarScanner` (and tarfile) reads them, and nothing may follow the last.
A plain ustar header (no pax records, no long name) is compared field by field, without parsing.
"""
from __future__ import annotations

import tarfile

from .errors import ShardError
from .samples import SampleSpan
from .tarformat import BLOCK, Member, TarScanner, padded


def _mismatch(url: str, m: Member, found: str) -> ShardError:
    return ShardError(url, m.offset, f"the index lists member {m.name!r} ({m.size} bytes) with its data here, but "
                                     f"the shard's headers say {found}: the index does not describe this shard; "
                                     f"rebuild it with `fluxfs shard index --force {url}`")


def _plain_header_matches(view: memoryview, at: int, m: Member) -> bool:
    """Whether the block at `at` of `view` is a plain regular-file ustar header naming `m` with `m.size` bytes."""
    if len(view) < at + BLOCK or view[at + 156] != 0x30 or view[at + 345] != 0:  # type "0", no ustar prefix
        return False
    try:
        name = m.name.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        return False
    n = len(name)
    if n > 100 or view[at:at + n] != name or (n < 100 and view[at + n] != 0) or b"\0" in name:
        return False
    field = bytes(view[at + 124:at + 136])
    try:  # as tarfile.nti: octal digits up to a NUL, or base-256 when the first bit is set
        size = tarfile.nti(field) if field[0] & 0x80 else int(field.split(b"\0", 1)[0].strip() or b"0", 8)
    except (ValueError, tarfile.HeaderError):
        return False
    return size == m.size


def check_span(url: str, span: SampleSpan, data: bytes | memoryview, base: int) -> None:
    """Check the headers before each of `span`'s members in `data` (shard bytes from offset `base`)."""
    pos = span.head
    if pos is None:
        return
    view = memoryview(data)
    for m in span.members:
        if pos < base or m.offset > base + len(view):
            raise ShardError(url, pos, f"the headers of member {m.name!r} are outside the bytes read")
        if m.offset - BLOCK != pos or not _plain_header_matches(view, pos - base, m):
            scanner = TarScanner(url, start=pos)
            try:
                found = scanner.feed(view[pos - base:m.offset - base], at=pos)
            except ShardError as e:
                raise _mismatch(url, m, f"{e.problem} at byte {e.offset}") from None
            if found[:1] != [m]:
                got = found[0] if found else None
                raise _mismatch(url, m, f"member {got.name!r} ({got.size} bytes) starts at byte {got.offset}"
                                if got else "no member starts there")
        pos = m.offset + padded(m.size)


def check_tail(url: str, after: int, data: bytes | memoryview, base: int, size: int) -> None:
    """Check that shard bytes [after, size) (in `data`, from offset `base`) hold no member: the index's last
    member is the shard's last."""
    scanner = TarScanner(url, start=after)
    found = scanner.feed(memoryview(data)[after - base:size - base], at=after)
    if found:
        raise ShardError(url, found[0].offset, f"the index lists no member after byte {after}, but the shard holds "
                                               f"member {found[0].name!r} ({found[0].size} bytes) here: the index does "
                                               f"not describe this shard; rebuild it with "
                                               f"`fluxfs shard index --force {url}`")
    scanner.finish(size)


def tail_start(members: list[Member]) -> int:
    """Where the bytes after an index's last member begin (0 for an index of no members)."""
    return members[-1].offset + padded(members[-1].size) if members else 0

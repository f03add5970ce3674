"""Claims: each small object downloaded once per node, also when processes start together on an empty cache.

Before `cat_objects` reads its misses from storage it claims them (`claim`, under the directory lock): the
objects nobody has claimed get rows in the index, not complete yet, in a new pack this process holds (its
exclusive flock) with their room counted in; objects another process claimed are not downloaded again but
waited for (`wait_for`) and read from its pack once complete. The wait is bounded: once the claimer lets go of
its pack without completing it (it died, its read failed) or the pack made no progress (its size and mtime: the
claimer touches it when its read returns, then writes it) for `stall` seconds, the objects are read from storage.
The claimer writes its packs off the read's path (`write`, on the filler thread): an object its read did not
return, or whose bytes fail the listing's size or crc32c, has its row dropped; the rest become complete at once.
"""
from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import sqlite3
from typing import Any

from ..errors import ChecksumMismatch
from ..gcs import checksums
from . import body, evict, index, packs
from .entry import Meta, crc_value, entry_id
from .lock import Stall
from .store import UNWRITABLE, NodeCache

log = logging.getLogger("fluxfs.cache")

Entry = tuple[str, str, str, str, int, Any]  # store, bucket, key, generation, size, crc32c


@dataclasses.dataclass
class Claim:
    """A pack this process holds for the objects it claimed: `entries` end to end from offset 0."""

    pack: packs.NewPack
    entries: list[Entry]

    @property
    def size(self) -> int:
        return sum(e[4] for e in self.entries)


def _split(entries: list[Entry], most: int) -> list[list[Entry]]:
    """The entries cut into packs of at most `most` bytes (an object larger than that alone)."""
    out: list[list[Entry]] = [[]]
    size = 0
    for e in entries:
        if out[-1] and size + e[4] > most:
            out.append([])
            size = 0
        out[-1].append(e)
        size += e[4]
    return out


def claim(cache: NodeCache, wanted: list[Entry], room: int, most: int) -> tuple[list[Claim], list[Entry]]:
    """(this process's claims: the wanted objects nobody has or is filling, at most `room` bytes in all and `most`
    a pack; the wanted objects another process claimed or completed meanwhile: `wait_for` them). Nothing claimed on
    a full or unwritable disk, a damaged index or no room under the limit: then every miss is read from storage."""
    unique = list(dict.fromkeys(wanted))
    made: list[Claim] = []
    try:
        with cache.dir_locked():
            db = index.connect(cache.directory)
            have = index.lookup(db, [e[:4] for e in unique], complete=False)
            for dead in {row[0] for row, done in have.values() if not done}:  # claimed by a fill: alive?
                if packs.remove(cache.directory, db, dead, only_if_dead=True) is not None:
                    have = {k: v for k, v in have.items() if v[0][0] != dead}
            theirs = [e for e in unique if e[:4] in have and have[e[:4]][0][2] == e[4]]
            todo, total = [], 0
            for e in unique:
                if e[:4] not in have and total + e[4] <= room \
                        and not os.path.exists(cache.path_of(entry_id(*e[1:4], e[0]), "data")):
                    todo.append(e)
                    total += e[4]
            if not todo or not evict.make_room(cache.directory, total, cache.limit):
                return [], theirs
            for group in _split(todo, most):
                made.append(Claim(packs.NewPack(cache.directory), group))
                made[-1].pack.allocate(made[-1].size)
            with index.write(db):
                for c in made:
                    rows, at = [], 0
                    for store, bucket, key, generation, size, crc in c.entries:
                        rows.append((store, bucket, key, generation, at, size, -1 if crc is None else crc))
                        at += size
                    index.claim(db, c.pack.name, rows)
            return made, theirs
    except (OSError, sqlite3.Error) as exc:
        for c in made:
            c.pack.close()  # not done: removed (its rows were never committed)
        if isinstance(exc, sqlite3.Error):
            cache.warns.index(exc)
        elif exc.errno in UNWRITABLE:
            cache.warns.full(exc)
        else:
            raise
        return [], []


def touch(claims: list[Claim]) -> None:
    """Progress, for the processes waiting on these claims: the read of their objects returned."""
    for c in claims:
        try:
            os.utime(c.pack.fd)
        except OSError:
            pass


async def wait_for(cache: NodeCache, theirs: list[Entry]) -> None:
    """Until the objects other processes claimed are complete (or dropped), or a claimer let go of its pack
    unfinished or made no progress for `cache.stall` seconds (`lock.Stall`). Cancelled at once (Ctrl-C)."""
    keys = [e[:4] for e in theirs]
    bound = Stall(cache.stall, first=0.002, most=0.05)
    while True:
        try:
            rows = index.lookup(index.connect(cache.directory), keys, complete=False)
        except sqlite3.Error:
            return
        pending = sorted({row[0] for row, done in rows.values() if not done})
        if not pending:
            return
        marks = [packs.held_stamp(cache.directory, p) for p in pending]
        if any(m is None for m in marks) or bound.stalled(marks):
            return  # a claimer let go unfinished, or stalled: storage
        await asyncio.sleep(bound.pause())


def write(cache: NodeCache, claim: Claim, got: dict[Entry, Any]) -> None:
    """The claim's pack written with the bytes read (`got`), its rows complete, but those of objects not read or
    failing their listing's size or crc32c (dropped: read from storage next time); then let go."""
    parts, dropped, crcs = [], [], []
    for e in claim.entries:
        data = got.get(e)
        meta = Meta(e[1], e[2], e[3], e[4], crc_value(e[5]), False, e[0])
        if isinstance(data, (bytes, bytearray, memoryview)):
            value = checksums.crc32c(data) if meta.crc32c is None else meta.crc32c
            try:
                body.check_sums(len(data), value, meta)
            except ChecksumMismatch as exc:
                log.warning("fluxfs node-local cache: %s", exc)
            else:
                parts.append(data)
                if meta.crc32c is None:
                    crcs.append((value, *e[:4]))
                continue
        parts.append(bytes(e[4]))
        dropped.append(e[:4])
    pack = claim.pack
    try:
        db = index.connect(cache.directory)
        if len(dropped) < len(claim.entries):
            pack.write(parts)
            index.complete(db, pack.name, dropped, crcs)
            pack.done = True
    except OSError as exc:
        if exc.errno not in UNWRITABLE:
            raise
        cache.warns.full(exc)
    except sqlite3.Error as exc:
        cache.warns.index(exc)
    finally:
        try:
            if not pack.done:
                with cache.dir_locked():
                    index.drop_pack(index.connect(cache.directory), pack.name)
        except (OSError, sqlite3.Error):
            pass  # a sweep removes the rows of a pack nobody holds
        pack.close()

"""Claims: each small object downloaded once per node, also when processes start together on an empty cache.

Before `cat_objects` reads its misses from storage it claims them (`claim`, under the directory lock): the
objects nobody has claimed get rows in the index, not complete yet, in the pack this process holds open for
its claims (packs.py: one pack takes the claims of many calls, a new one once it holds 64 MiB), with their
room counted in; objects another process claimed are not downloaded again but waited for (`wait_for`) and
read from its pack once complete. The wait is bounded: once the claimer is gone with their rows not complete
(it died) or none of them became complete (or dropped) for `stall` seconds, the objects are read from storage
(the rows tell, not the pack's size or mtime: a pack takes the claimer's other calls' claims, and every read of
its complete entries touches it). The claimer writes its claims off the read's path (`write`, on the filler
thread, one `pwrite` run per run of objects read): an object its read did not return, or whose bytes are not
the listing's size, has its row dropped; the rest become complete at once (their crc32c is the one the read
checked).
"""
from __future__ import annotations

import asyncio
import dataclasses
import fcntl
import logging
import os
import sqlite3
import threading
from typing import Any, Optional

from ..gcs import checksums, fork
from . import evict, index, packs
from .lock import Stall
from .store import UNWRITABLE, NodeCache

log = logging.getLogger("fluxfs.cache")

Entry = tuple[str, str, str, str, int, Any]  # store, bucket, key, generation, size, crc32c


@dataclasses.dataclass(eq=False)
class Open:
    """A pack this process holds for its claims, and how many of them are not written yet; `retired` once full
    (closed when the last is written). `held`: its shared `flock`, let go while nothing is pending (eviction may
    take the pack then, as any other: a process's open pack is never pinned) and taken back by its next claim."""

    pack: packs.NewPack
    pending: int = 0
    retired: bool = False
    held: bool = True
    gone: bool = False  # evicted or removed while idle: takes no more claims


class _Opened:
    """This process's open pack per cache directory (where packs.SHAREABLE), and the lock over the `Open`s."""

    def __init__(self) -> None:
        self.current: dict[str, Open] = {}
        self.guard = threading.Lock()

    def _after_fork(self) -> None:  # the one fork hook: a forked child writes none of its parent's claims
        for op in self.current.values():
            op.pack.forget()  # its copies of the files only: the parent still holds the pack
        self.current = {}
        self.guard = threading.Lock()


_OPENED = _Opened()
fork.reset_in_child(_OPENED)


@dataclasses.dataclass
class Claim:
    """Objects this process claimed: `entries` end to end from offset `start` of their pack."""

    open: Open
    entries: list[Entry]
    start: int = 0

    @property
    def pack(self) -> packs.NewPack:
        return self.open.pack

    @property
    def size(self) -> int:
        return sum(e[4] for e in self.entries)


def _hold(op: Open) -> None:
    """Take back the shared `flock` of a pack let go while idle (call under `_OPENED.guard`); one being removed
    meanwhile (`clear`) is `gone`."""
    if not op.held:
        try:
            fcntl.flock(op.pack.fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            op.held = True
        except BlockingIOError:
            op.gone = True


def _place(cache: NodeCache, todo: list[Entry], most: int, fresh: list[Open], share: bool) -> list[Claim]:
    """The entries as claims: appended to this process's open pack while it holds at most `most` bytes, then in
    new ones (`fresh` gets them; an object larger than `most` alone). Call under the directory lock."""
    made: list[Claim] = []
    op = _OPENED.current.get(cache.directory) if share else None
    if op is not None:
        with _OPENED.guard:
            _hold(op)  # idle since its last write: held again before it takes claims
        if os.fstat(op.pack.fd).st_nlink == 0:
            op.gone = True  # evicted while idle, or removed by hand
    for e in todo:
        if op is None or op.gone or op.pack.end and op.pack.end + e[4] > most:
            op = Open(packs.NewPack(cache.directory))
            fresh.append(op)
        if not made or made[-1].open is not op:
            made.append(Claim(op, [], op.pack.end))
        made[-1].entries.append(e)
        op.pack.end += e[4]
    return made


def _retire(cache: NodeCache, op: Open) -> None:
    """No more claims in this pack: closed now, or by the write of its last claim."""
    with _OPENED.guard:
        op.retired = True
        idle = op.pending == 0
    if idle:
        op.pack.close()


def claim(cache: NodeCache, wanted: list[Entry], room: int, most: int, share: bool = True
          ) -> tuple[list[Claim], list[Entry]]:
    """(this process's claims: the wanted objects nobody has or is filling, at most `room` bytes in all and `most`
    a pack; the wanted objects another process claimed or completed meanwhile: `wait_for` them). Nothing claimed on
    a full or unwritable disk, a damaged index or no room under the limit: then every miss is read from storage.
    `share=False`: in packs of their own, closed once written."""
    share = share and packs.SHAREABLE
    unique = list(dict.fromkeys(wanted))
    made: list[Claim] = []
    fresh: list[Open] = []
    committed = False
    try:
        with cache.dir_locked():  # (claims of this process's threads one at a time too)
            db = index.connect(cache.directory)
            have = index.lookup(db, [e[:4] for e in unique], complete=False)
            for dead in {row[0] for row, done in have.values() if not done}:  # claimed by a fill: alive?
                if not packs.held(cache.directory, dead):  # nobody fills it: a killed filler's claims
                    index.drop_pending(db, dead)
                    packs.remove(cache.directory, db, dead, only_if_dead=True)  # and its file, if nothing is done
                    have = {k: v for k, v in have.items() if v[1] or v[0][0] != dead}
            theirs = [e for e in unique if e[:4] in have and have[e[:4]][0][2] == e[4]]
            todo, total = [], 0
            for e in unique:  # (the caller looked for whole-object entries of them just before)
                if e[:4] not in have and total + e[4] <= room:
                    todo.append(e)
                    total += e[4]
            if not todo or not evict.make_room(cache.directory, total, cache.limit):
                return [], theirs
            current = _OPENED.current.get(cache.directory) if share else None
            end = current.pack.end if current else 0
            try:
                made = _place(cache, todo, most, fresh, share)
                for c in made:
                    c.pack.allocate(c.start, c.size)
                with index.write(db):
                    for c in made:
                        rows, at = [], c.start
                        for store, bucket, key, generation, size, crc in c.entries:
                            rows.append((store, bucket, key, generation, at, size, -1 if crc is None else crc))
                            at += size
                        index.claim(db, c.pack.name, rows)
            except BaseException:
                if current is not None:
                    current.pack.end = end  # its claims' room given back (the next claim allocates it again)
                raise
            committed = True
            with _OPENED.guard:
                for c in made:
                    c.open.pending += 1
                    _hold(c.open)  # (its last write may have let it go since `_place`)
                full = _OPENED.current.get(cache.directory) if share and fresh else None
                if share and fresh:
                    _OPENED.current[cache.directory] = fresh[-1]  # the last made takes the next calls' claims
            for op in ([full] if full else []) + (fresh[:-1] if share else fresh):
                _retire(cache, op)  # full (or one call's only): closed once its claims are written
            return made, theirs
    except (OSError, sqlite3.Error) as exc:
        if committed:  # only letting go of a full pack failed: its file is swept; the claims stand
            log.warning("fluxfs node-local cache: %s", exc)
            return made, theirs
        for op in fresh:
            op.pack.close()  # not done: removed (its rows were never committed), and never the current one
        if isinstance(exc, sqlite3.Error):
            cache.warns.index(exc)
        elif exc.errno in UNWRITABLE:
            cache.warns.full(exc)
        else:
            raise
        return [], []


def _look(cache: NodeCache, keys: list[tuple[str, str, str, str]]) -> Optional[frozenset]:
    """The waited objects' rows not complete yet (pack, object): the claimers' progress, which only their writes
    change (reads of a pack's complete entries touch it, so its size and mtime are not); None once there are none
    or a claimer let go of its pack unfinished (or the index cannot be read): stop waiting."""
    try:
        rows = index.lookup(index.connect(cache.directory), keys, complete=False)
    except sqlite3.Error:
        return None
    pending = frozenset((row[0], k) for k, (row, done) in rows.items() if not done)
    if not pending or not all(packs.held(cache.directory, p) for p in {p for p, _ in pending}):
        return None
    return pending


async def wait_for(cache: NodeCache, theirs: list[Entry]) -> None:
    """Until the objects other processes claimed are complete (or dropped), or a claimer let go of its pack
    unfinished or completed none of them for `cache.stall` seconds (`lock.Stall`). Each look on a cache thread,
    off the event loop. Cancelled at once (Ctrl-C)."""
    keys = [e[:4] for e in theirs]
    bound = Stall(cache.stall, first=0.002, most=0.05)
    loop = asyncio.get_running_loop()
    while True:
        mark = await loop.run_in_executor(cache.executor(), _look, cache, keys)
        if mark is None or bound.stalled(mark):
            return  # done, or a claimer let go unfinished or stalled: storage
        await asyncio.sleep(bound.pause())


def write(cache: NodeCache, made: list[Claim], got: dict[Entry, Any]) -> None:
    """The claims' packs written with the bytes read (`got`: one `pwrite` run per run of objects read end to end,
    across claims), their rows complete in one transaction; the rows of objects not read, or whose bytes are not
    the listing's size, dropped (read from storage next time). The crc32c of the bytes is the one the read checked
    (computed here where the listing had none). Nothing written or committed: every claim's rows dropped."""
    runs: dict[Open, list[list]] = {}  # [offset, end, bytes end to end] of the objects read, by pack
    done, dropped, crcs = [], [], []
    for c in sorted(made, key=lambda c: c.start):
        out, at, name = runs.setdefault(c.open, []), c.start, c.pack.name
        for e in c.entries:
            data = got.get(e)
            read = isinstance(data, (bytes, bytearray, memoryview))
            if read and len(data) == e[4]:
                if not out or out[-1][1] != at:
                    out.append([at, at, []])
                out[-1][1] += e[4]
                out[-1][2].append(data)
                done.append((*e[:4], name))
                if e[5] is None:
                    crcs.append((checksums.crc32c(data), *e[:4], name))
            else:
                if read:
                    log.warning("fluxfs node-local cache: %s/%s (generation %s): %d bytes read, the listing says "
                                "%d; not cached", e[1], e[2], e[3], len(data), e[4])
                dropped.append((*e[:4], name))
            at += e[4]
    ok = False
    try:
        for op, parts in runs.items():
            for start, _, pieces in parts:
                op.pack.write(pieces, start)
        index.complete(index.connect(cache.directory), done, dropped, crcs)
        ok = True
        for op, parts in runs.items():
            op.pack.done = op.pack.done or bool(parts)
    except OSError as exc:
        if exc.errno not in UNWRITABLE:
            raise
        cache.warns.full(exc)
    except sqlite3.Error as exc:
        cache.warns.index(exc)
    finally:
        try:
            if not ok:
                with cache.dir_locked():
                    index.drop_rows(index.connect(cache.directory),
                                    [(*e[:4], c.pack.name) for c in made for e in c.entries])
        except (OSError, sqlite3.Error):
            pass  # rows of a pack nobody fills are removed by the claim that meets them
        for c in made:
            _settle(c)


def _settle(claim: Claim) -> None:
    """One claim of its pack written (or let go): the pack let go while nothing is pending, closed once retired."""
    pack = claim.pack
    with _OPENED.guard:
        op = claim.open
        op.pending -= 1
        idle = op.retired and op.pending == 0
        if op.pending == 0 and not op.retired and op.held and pack.fd >= 0:
            fcntl.flock(pack.fd, fcntl.LOCK_UN)  # nothing pending: evictable until its next claim
            op.held = False
    if idle:
        pack.close()

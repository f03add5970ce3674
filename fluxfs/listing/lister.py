"""`Lister`: one prefix listed by many concurrent `objects.list` calls, with work stealing.

The key range of a prefix is split into spans ``[start, end)`` (GCS's ``startOffset`` is
inclusive, ``endOffset`` exclusive). Each worker coroutine pages through one span; when a
worker runs out of work it takes the upper part of the span with the most estimated work
left, split at a key between that span's last listed name and its end. Spans partition the
key space and a worker only keeps names strictly above its last one and below its (possibly
shrunk) end, so every object comes out exactly once whatever the splits.

Where to split: names are read as mixed-radix numbers over the characters seen at each
position (`keyspace.KeySpace`), and a span's last page gives a density (names per unit of that
space), so a split can leave the victim about N names. Only spans that have listed a page
are split (except a few chunks of a fresh unbounded tail, so the workers fan out fast), the
victim keeps at least its in-flight page, and every split key is checked
against the real bounds (falling back to midpoints, then to "just above the last name");
a range with no key strictly inside (``"a"`` .. ``"a\\x00"``) is simply not split.

A split shrinks the victim's ``endOffset`` while its next page may be on the wire: names at
or above the new end are dropped from that page, and its page token (issued for the old
end) is discarded in favour of ``startOffset=last`` (a new `fluxfs.gcs.pager` query).
Objects added or deleted meanwhile are listed or not, as with any listing, but never twice.

All of it runs as asyncio tasks on the filesystem's event loop (no processes, no threads),
so it works in notebooks and inside DataLoader workers.
"""
from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, AsyncGenerator

from sortedcontainers import SortedKeyList

from ..gcs.pager import list_pages
from ..gcs.timestamps import TimestampCache
from .hidden import drop_temporaries
from .keyspace import Alphabets, choose_split

if TYPE_CHECKING:  # pragma: no cover
    from ..gcs.client import Client

# Pages in flight. Re-measured once the server's pages got ~4x cheaper (~2 ms of server CPU
# per 1,000-item page; client and server on 2 cores shared with other jobs), `python -m bench
# listing --profile cloud --objects 500000 --concurrency 16,32,64[,128]`, objects/s, median
# of 3 and of 2: c16 212k, c32 177k, c64 268k; then c32 141k, c64 159k, c128 214k. Page
# latency is 30 ms plus queueing on the busy cores, so more pages in flight keep paying past
# the 16 chosen when the server's CPU was the limit; 64 was ahead in every repeat, costs ~10%
# more (partial) pages than 16 from extra splits, and stays under aiohttp's 100-connection pool.

# Only the fields an info dict needs: partial responses shrink each page ~5x and cut JSON parsing.
LIST_FIELDS = "items(name,size,generation,crc32c,updated),nextPageToken"


@dataclass(eq=False)
class Span:
    """One key range being listed: names in [start, end), of which those <= `last` are done."""

    start: str
    end: str | None
    last: str | None = None
    density: tuple[str, str, int] | None = None   # (ref, last, intervals) from a recent page
    remaining: Any = None               # estimated names left (int, inf, or None = unknown)
    last_gens: set = field(default_factory=set)  # versions listings: generations of `last` already taken
    probes: int = 0                     # unlisted unbounded tail: splits allowed before its first page
    done: bool = False
    buffer: list = field(default_factory=list)   # sorted mode: listed, not yet emitted

    @property
    def lo(self) -> str:
        return self.last if self.last is not None else self.start


_INF = float("inf")
_PROBES = 3
_DONE = object()


class Lister:
    """Lists one bucket prefix with `concurrency` workers and puts batches of info dicts on `queue`."""

    def __init__(self, client: "Client", bucket: str, prefix: str, *, concurrency: int, page_size: int,
                 sort: bool, include_temp: bool, progress: Any, queue_size: int, mtime: bool = False,
                 versions: bool = False, start_offset: str | None = None, end_offset: str | None = None):
        self.client = client
        # versions=True lists every generation: one name may span two pages, so `last` alone
        # cannot tell what was taken; its generations already taken are kept beside it.
        self.versions = versions
        self.bucket = bucket
        self.prefix = prefix
        self.concurrency = max(1, int(concurrency))
        self.page_size = page_size
        self.sort = sort
        self.progress = progress
        self.mtimes: TimestampCache | None = TimestampCache() if mtime else None
        self.queue: asyncio.Queue = asyncio.Queue(maxsize=queue_size)
        self.what = f"{bucket}/{prefix}" if prefix else bucket
        self.name_prefix = bucket + "/"
        # fluxfs's temporaries are left out (named and marked as one: `hidden.py`) unless asked for.
        self.temp_prefix = None if include_temp else client.options.temp_prefix
        self.alphabets = Alphabets()
        self.listed = 0
        self.active: set[Span] = set()     # owned by a worker, not done
        self.unowned: list[Span] = []
        self.pending = SortedKeyList(key=lambda s: s.start)   # sorted mode: spans not fully emitted
        self.emit_lock = asyncio.Lock()
        self.changed = asyncio.Event()
        self.min_split = 2 * page_size   # the victim keeps its in-flight page, the thief gets at least one
        for start, end in self._initial_ranges(prefix, include_temp, start_offset, end_offset):
            span = Span(start, end)
            self.alphabets.learn([start[len(prefix):], (end or "")[len(prefix):]])
            self._add_span(span)
            self.unowned.append(span)

    @staticmethod
    def _initial_ranges(prefix: str, include_temp: bool, start_offset: str | None = None,
                        end_offset: str | None = None) -> list[tuple[str, str | None]]:
        """The prefix's key range, cut to ``[start_offset, end_offset)`` when given (temporaries are
        filtered by name in `_emit`: a user's own objects under the reserved prefix are listed).

        The top of the range is None, not ``prefix_end(prefix)``: the ``prefix`` parameter
        already bounds every request, and spans are estimated and split in the space of key
        suffixes, where a bound outside the prefix has no spelling (it read as the empty
        suffix, so a prefix's one span looked empty and was never split).
        """
        start = prefix if start_offset is None or start_offset < prefix else start_offset
        if not start.startswith(prefix):
            return []   # above every key of the prefix
        if end_offset is not None and end_offset <= start:
            return []   # an empty range
        if end_offset is not None and not end_offset.startswith(prefix):
            end_offset = None   # above every key of the prefix: the prefix bounds the listing already
        return [(start, end_offset)]

    def _add_span(self, span: Span) -> None:
        if self.sort:
            self.pending.add(span)

    def _notify(self) -> None:
        self.changed.set()
        self.changed = asyncio.Event()

    # -- estimates and splits -----------------------------------------------------------

    def _estimate(self, span: Span) -> Any:
        """Names left in `span` from its density sample: int, inf (unknown but large), or None."""
        if span.done or span.density is None:
            return None
        n = len(self.prefix)
        ref, last = span.density[0][n:], span.density[1][n:]
        intervals = span.density[2]
        lo, hi = span.lo[n:], (span.end[n:] if span.end is not None else None)
        ks = self.alphabets.space()
        gap = ks.value(last) - ks.value(ref)
        width = ks.value(hi) - ks.value(lo)
        if width <= 0:
            return 0
        if gap <= 0:
            return _INF
        return width * intervals // gap

    def _steal(self) -> Span | None:
        """Split the span with the most estimated work left; the caller owns the upper part."""
        # Only spans that have listed something: splitting a span before its first page is a
        # guess that can fall below its data and take all of it, over and over (livelock).
        # The one exception is bounded: the unbounded tail split off a listed span may be split
        # `_PROBES` more times before its first page (chunks extrapolated from the listed
        # span's density), so idle workers fan out in one round trip instead of one each
        # round trip; at worst that costs `_PROBES` empty pages per listed page of the tail.
        candidates = [s for s in self.active if (s.last is not None or s.probes > 0)
                      and s.remaining is not None and s.remaining >= self.min_split]
        candidates.sort(key=lambda s: s.remaining, reverse=True)
        n = len(self.prefix)
        for victim in candidates:
            lo, hi = victim.lo[n:], (victim.end[n:] if victim.end is not None else None)
            # The victim keeps at least the page it is fetching now (splitting inside that
            # page would throw away names already on the wire). Where the estimate is huge (an
            # unbounded tail), it keeps a chunk as large as everything listed so far, so the
            # tail's reach doubles every round and later thieves can halve the chunk; otherwise
            # it keeps half of what is left.
            chunk = max(8 * self.page_size, self.listed)
            if victim.remaining > 4 * chunk:
                keep_items = chunk
            else:
                keep_items = max(self.page_size, int(victim.remaining // 2))
            if victim.remaining - keep_items < self.page_size:
                continue
            ref, last, intervals = victim.density
            keep = (ref[n:], last[n:], intervals, keep_items)
            m = choose_split(lo, hi, alphabets=self.alphabets, keep=keep)
            if m is None:
                victim.remaining = None   # unsplittable until its next page says otherwise
                continue
            key = self.prefix + m
            thief = Span(key, victim.end, density=victim.density)
            if victim.end is None:
                thief.probes = _PROBES if victim.last is not None else victim.probes - 1
            victim.probes = 0
            victim.end = key
            self._add_span(thief)
            self.active.add(thief)
            victim.remaining = self._estimate(victim)
            thief.remaining = self._estimate(thief)
            return thief
        return None

    async def _acquire(self) -> Span | None:
        """A span to list: an initial one, or the upper part of a busy one; None when all is listed."""
        while True:
            if self.unowned:
                span = self.unowned.pop(0)
                self.active.add(span)
                return span
            if not self.active:
                return None
            span = self._steal()
            if span is not None:
                self._notify()
                return span
            await self.changed.wait()

    # -- paging ---------------------------------------------------------------------------

    def _pages(self, span: Span) -> AsyncGenerator[dict, None]:
        """A pager over `span` from its last listed name (or start) to its current end."""
        start = span.lo
        return list_pages(self.client, self.bucket, prefix=self.prefix, fields=LIST_FIELDS, page_size=self.page_size,
                          start_offset=start if start != self.prefix else None, end_offset=span.end,
                          params={"versions": "true"} if self.versions else None, what=self.what)

    async def _drain(self, span: Span) -> None:
        while not span.done:
            # One pager per (startOffset, endOffset): its page tokens belong to that query. When
            # a split moves our end, its next token is dropped and paging restarts from the last
            # name (startOffset is inclusive: that name, if it comes back, is dropped below).
            end = span.end
            pages = self._pages(span)
            try:
                async for page in pages:
                    await self._take(span, page)
                    if span.done or span.end != end:
                        break
            finally:
                await pages.aclose()
        if self.sort:
            await self._emit(span, [])

    async def _take(self, span: Span, page: dict) -> None:
        """Keep a page's names strictly above `last` and below the (possibly moved) end; update estimates; emit."""
        items = page.get("items") or []
        new_end = span.end
        last = span.last
        if items:
            first_name, last_name = items[0]["name"], items[-1]["name"]
            low = last
            if self.versions and low is not None and first_name <= low:
                taken = span.last_gens
                items = [it for it in items if it["name"] > low
                         or (it["name"] == low and it.get("generation") not in taken)]
                low = None  # applied: only the end is left to check
                first_name = items[0]["name"] if items else ""
            if not ((low is None or first_name > low) and (new_end is None or last_name < new_end)):
                items = [it for it in items if (low is None or it["name"] > low)
                         and (new_end is None or it["name"] < new_end)]
        hit_end = new_end is not None and bool(page.get("items")) and page["items"][-1]["name"] >= new_end
        if items:
            ref = items[0]["name"] if len(items) > 1 else span.lo
            span.density = (ref, items[-1]["name"], max(1, len(items) - 1))
            if self.versions:
                new_last = items[-1]["name"]
                gens = {it.get("generation") for it in items if it["name"] == new_last}
                span.last_gens = (span.last_gens | gens) if new_last == span.last else gens
            span.last = items[-1]["name"]
            # Sampled names (16 per page) teach each position's characters; cheap enough per page.
            step = max(1, len(items) // 16)
            n = len(self.prefix)
            self.alphabets.learn([it["name"][n:] for it in items[::step]] + [span.last[n:]])
        if page.get("nextPageToken") is None or hit_end:
            span.done = True
            self.active.discard(span)
        span.remaining = self._estimate(span)
        self._notify()
        if items:
            await self._emit(span, items)

    async def _emit(self, span: Span, items: list[dict]) -> None:
        # The only per-object work of the lister (~40% of a listing's client CPU), kept to what
        # gcsfs's info shape needs; timestamps are parsed only when asked (`find`), once per
        # distinct string. A field a server leaves out is its default: some omit "size" of 0-byte objects.
        tp = self.temp_prefix
        if tp is not None and items and items[0]["name"][:len(tp)] <= tp <= items[-1]["name"][:len(tp)]:
            # A sorted page that reaches into the reserved prefix: drop what fluxfs marked as its own.
            items = await drop_temporaries(self.client, self.bucket, items, tp, self.versions)
            if not items and not self.sort:
                return
        prefix = self.name_prefix
        mtimes = self.mtimes
        if mtimes is None:
            for it in items:
                it["name"] = prefix + it["name"]
                it["size"] = int(it.get("size", 0))
                it["type"] = "file"
        else:
            for it in items:
                it["name"] = prefix + it["name"]
                it["size"] = int(it.get("size", 0))
                it["type"] = "file"
                it["mtime"] = mtimes[it.get("updated")]
        self.listed += len(items)
        if self.progress is not None and items:
            self.progress.update(len(items))
        if not self.sort:
            await self.queue.put(items)
            return
        span.buffer.extend(items)
        # Sorted: only the lowest span not yet emitted may emit; spans partition the key space in order.
        async with self.emit_lock:
            while self.pending:
                head = self.pending[0]
                if head.buffer:
                    batch, head.buffer = head.buffer, []
                    await self.queue.put(batch)
                    continue   # look again: names (and `done`) may have arrived while we waited
                if not head.done:
                    break
                self.pending.remove(head)

    async def _worker(self) -> None:
        while True:
            span = await self._acquire()
            if span is None:
                return
            await self._drain(span)

    async def run(self) -> None:
        """Run the workers; end the queue with `_DONE`, or with the exception that stopped them."""
        workers = [asyncio.ensure_future(self._worker()) for _ in range(self.concurrency)]
        try:
            done, _ = await asyncio.wait(workers, return_when=asyncio.FIRST_EXCEPTION)
            for t in done:
                if not t.cancelled() and t.exception() is not None:
                    raise t.exception()
        except BaseException as exc:
            for t in workers:
                t.cancel()
            await asyncio.gather(*workers, return_exceptions=True)
            if isinstance(exc, Exception):
                await self.queue.put(exc)
            raise
        await self.queue.put(_DONE)

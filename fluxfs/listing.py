"""Parallel range listing with work stealing: one prefix listed by many concurrent `objects.list` calls.

The key range of a prefix is split into spans ``[start, end)`` (GCS's ``startOffset`` is
inclusive, ``endOffset`` exclusive). Each worker coroutine pages through one span; when a
worker runs out of work it takes the upper part of the span with the most estimated work
left, split at a key between that span's last listed name and its end. Spans partition the
key space and a worker only keeps names strictly above its last one and below its (possibly
shrunk) end, so every object comes out exactly once whatever the splits.

Where to split: names are read as mixed-radix numbers over the characters seen at each
position (`KeySpace`), and a span's last page gives a density (names per unit of that
space), so a split can leave the victim about N names. Only spans that have listed a page
are split (except a few chunks of a fresh unbounded tail, so the workers fan out fast), the
victim keeps at least its in-flight page, and every split key is checked
against the real bounds (falling back to midpoints, then to "just above the last name");
a range with no key strictly inside (``"a"`` .. ``"a\\x00"``) is simply not split.

A split shrinks the victim's ``endOffset`` while its next page may be on the wire: names at
or above the new end are dropped from that page, and its page token (issued for the old
end) is discarded in favour of ``startOffset=last``. Objects added or deleted meanwhile
are listed or not, as with any listing, but never twice.

All of it runs as asyncio tasks on the filesystem's event loop (no processes, no threads),
so it works in notebooks and inside DataLoader workers.
"""
from __future__ import annotations

import asyncio
import bisect
import contextlib
import datetime
import operator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, AsyncIterator, Iterable

from sortedcontainers import SortedKeyList

from .gcs import http
from .gcs.tempnames import TEMP_PREFIX

if TYPE_CHECKING:  # pragma: no cover
    from .core import FluxFileSystem

# Pages in flight. Re-measured once the server's pages got ~4x cheaper (~2 ms of server CPU
# per 1,000-item page; client and server on 2 cores shared with other jobs), `python -m bench
# listing --profile cloud --objects 500000 --concurrency 16,32,64[,128]`, objects/s, median
# of 3 and of 2: c16 212k, c32 177k, c64 268k; then c32 141k, c64 159k, c128 214k. Page
# latency is 30 ms plus queueing on the busy cores, so more pages in flight keep paying past
# the 16 chosen when the server's CPU was the limit; 64 was ahead in every repeat, costs ~10%
# more (partial) pages than 16 from extra splits, and stays under aiohttp's 100-connection pool.

# Only the fields an info dict needs: partial responses shrink each page ~5x and cut JSON parsing.
LIST_FIELDS = "items(name,size,generation,crc32c,updated),nextPageToken"

_MAX_CODEPOINT = 0x10FFFF
_SURROGATES = range(0xD800, 0xE000)


def _next_char(c: str) -> str | None:
    """The smallest valid character above `c` (skipping surrogates), or None above U+10FFFF."""
    o = ord(c) + 1
    if o in _SURROGATES:
        o = 0xE000
    return chr(o) if o <= _MAX_CODEPOINT else None


def prefix_end(prefix: str) -> str | None:
    """The smallest key above every key starting with `prefix` (None: no such key, list to the end)."""
    p = prefix
    while p:
        nxt = _next_char(p[-1])
        if nxt is not None:
            return p[:-1] + nxt
        p = p[:-1]
    return None


_CLASSES = ("0123456789", "0123456789abcdef", "0123456789ABCDEF", "abcdefghijklmnopqrstuvwxyz",
            "ABCDEFGHIJKLMNOPQRSTUVWXYZ")


def _complete(chars: set[str]) -> set[str]:
    """Fill a position's sampled characters out to the smallest familiar class containing them.

    A page of ``img_00000000..img_00000999`` shows only '0' in the thousands place; without
    the other digits, extrapolating past 999 would jump straight to 1000s of the next digit.
    """
    for cls in _CLASSES:
        if chars and chars.issubset(cls):
            return chars | set(cls)
    return chars


class KeySpace:
    """A monotone map between key suffixes and integers, to bisect and extrapolate key ranges.

    A key is read as a mixed-radix number, one digit per character position: digit 0 is
    "end of key", digits 1..k are the characters seen at that position in sorted order, and
    digit k+1 stands for anything above them. Per-position alphabets make numbered names
    (``img_000123.jpg``) nearly linear, so extrapolating from one page of names lands close
    to the intended count; over raw code points (`uniform`, the fallback) midpoints would land
    among characters no name uses. Unseen characters map to the next seen one, so the map is
    monotone but not injective: callers check every computed key against the real bounds.
    """

    def __init__(self, alphabets: list[Iterable[str]]):
        self.alphs = [sorted(_complete(set(a))) for a in alphabets]
        self.radices = [len(a) + 2 for a in self.alphs]
        self._values: dict[str, int] = {}   # the same few bounds are valued on every page

    @classmethod
    def uniform(cls, n: int) -> "KeySpace":
        """Raw code points (+1, so 0 is "end of key") over n positions."""
        ks = cls([])
        ks.alphs = [None] * n
        ks.radices = [_MAX_CODEPOINT + 2] * n
        return ks

    def _digit(self, i: int, c: str) -> int:
        alph = self.alphs[i]
        if alph is None:
            return ord(c) + 1
        return 1 + bisect.bisect_left(alph, c)

    def _char(self, i: int, d: int) -> str | None:
        """The character for digit `d` >= 1 at position `i`, or None if none is valid there."""
        alph = self.alphs[i]
        if alph is None:
            o = d - 1
            return None if o in _SURROGATES else chr(o)
        if d <= len(alph):
            return alph[d - 1]
        return _next_char(alph[-1]) if alph else None

    def top(self) -> int:
        """The value of the end of the key space (above every key)."""
        v = 1
        for r in self.radices:
            v *= r
        return v

    def value(self, s: str | None) -> int:
        """`s` as an integer (truncated to the known positions); None is the end of the key space."""
        if s is None:
            return self.top()
        v = self._values.get(s)
        if v is not None:
            return v
        v = 0
        for i, r in enumerate(self.radices):
            v = v * r + (self._digit(i, s[i]) if i < len(s) else 0)
        if len(self._values) < 100_000:
            self._values[s] = v
        return v

    def key(self, v: int) -> str | None:
        """A key near the value `v`, rounded up where digits cannot be spelled; None if out of range."""
        if v < 0:
            return None
        digits = []
        for r in reversed(self.radices):
            v, d = divmod(v, r)
            digits.append(d)
        if v:
            return None
        digits.reverse()
        out = []
        for i, d in enumerate(digits):
            if d == 0:
                if any(digits[i + 1:]):
                    # "end of key" followed by more digits has no spelling: round up.
                    c = self._char(i, 1)
                    if c is not None:
                        out.append(c)
                break
            c = self._char(i, d)
            if c is None:
                if self.alphs[i] is None and (d - 1) in _SURROGATES:
                    out.append("\ue000")   # round a surrogate up to the next valid character
                    break
                return None
            out.append(c)
        return "".join(out)


class Alphabets:
    """Characters seen at each position of key suffixes (sampled from listed names)."""

    def __init__(self):
        self.sets: list[set[str]] = []
        self._seen = 0                      # characters recorded over all positions
        self._space: KeySpace | None = None  # cached until a new character is learned

    def learn(self, keys: Iterable[str]) -> None:
        sets = self.sets
        for k in keys:
            if len(k) > len(sets):
                sets.extend(set() for _ in range(len(k) - len(sets)))
            for s, c in zip(sets, k):
                s.add(c)
        seen = sum(map(len, sets))
        if seen != self._seen:
            self._seen, self._space = seen, None

    def space(self) -> KeySpace:
        """A KeySpace over the learned positions (split keys are never learned: they are not names).

        Cached: it is asked for on every page, and after the first pages nothing new is learned.
        """
        if self._space is None:
            self._space = KeySpace(self.sets)
        return self._space


def choose_split(lo: str, hi: str | None, *, alphabets: Alphabets | None = None,
                 keep: tuple[str, str, int, int] | None = None) -> str | None:
    """A key `m` with lo < m < hi (hi None: no upper bound), or None when the range cannot be split.

    All arguments are key suffixes (after the listing prefix). By default `m` is a midpoint.
    With `keep = (ref, last, intervals, items)` (a density sample: `intervals` name gaps
    between `ref` and `last`), `m` is placed about `items` names above `lo` by extrapolation.
    Falls back to midpoints over the learned alphabets, then over raw code points; every
    candidate is checked against the real bounds, so a poor guess costs balance, never
    correctness.
    """
    def ok(m: str | None) -> bool:
        return m is not None and m > lo and (hi is None or m < hi)

    spaces = []
    if alphabets is not None:
        ks = alphabets.space()
        if keep is not None:
            ref, last, intervals, items = keep
            gap = ks.value(last) - ks.value(ref)
            if gap > 0 and intervals > 0:
                m = ks.key(ks.value(lo) + gap * items // intervals)
                if ok(m):
                    return m
        spaces.append(ks)
    n = max(len(lo), len(hi or "")) + 2
    spaces += [KeySpace.uniform(n), KeySpace.uniform(n + 2)]
    for ks in spaces:
        m = ks.key((ks.value(lo) + ks.value(hi)) // 2)
        if ok(m):
            return m
    # Last resort, lopsided but valid: just above `lo` (e.g. between U+D7FF and U+E000 only
    # surrogates lie at the first position, so no midpoint can be spelled there).
    m = lo + "\U0010ffff"
    return m if ok(m) else None


@dataclass(eq=False)
class Span:
    """One key range being listed: names in [start, end), of which those <= `last` are done."""

    start: str
    end: str | None
    last: str | None = None
    token: str | None = None
    token_query: tuple[str, str | None] | None = None   # (startOffset, endOffset) the token belongs to
    density: tuple[str, str, int] | None = None   # (ref, last, intervals) from a recent page
    remaining: Any = None               # estimated names left (int, inf, or None = unknown)
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

    def __init__(self, fs: "FluxFileSystem", bucket: str, prefix: str, *, concurrency: int, page_size: int,
                 sort: bool, include_temp: bool, progress: Any, queue_size: int, mtime: bool = False):
        self.fs = fs
        self.bucket = bucket
        self.prefix = prefix
        self.concurrency = max(1, int(concurrency))
        self.page_size = page_size
        self.sort = sort
        self.progress = progress
        self.mtimes: _Timestamps | None = _Timestamps() if mtime else None
        self.queue: asyncio.Queue = asyncio.Queue(maxsize=queue_size)
        self.url = fs.json_url("b/{}/o", bucket)
        self.what = f"{bucket}/{prefix}" if prefix else bucket
        self.name_prefix = bucket + "/"
        self.alphabets = Alphabets()
        self.listed = 0
        self.active: set[Span] = set()     # owned by a worker, not done
        self.unowned: list[Span] = []
        self.pending = SortedKeyList(key=lambda s: s.start)   # sorted mode: spans not fully emitted
        self.emit_lock = asyncio.Lock()
        self.changed = asyncio.Event()
        self.min_split = 2 * page_size   # the victim keeps its in-flight page, the thief gets at least one
        for start, end in self._initial_ranges(prefix, include_temp):
            span = Span(start, end)
            self.alphabets.learn([start[len(prefix):], (end or "")[len(prefix):]])
            self._add_span(span)
            self.unowned.append(span)

    @staticmethod
    def _initial_ranges(prefix: str, include_temp: bool) -> list[tuple[str, str | None]]:
        """The prefix's key range, minus fluxfs's temporary prefix unless asked for.

        The top of the range is None, not ``prefix_end(prefix)``: the ``prefix`` parameter
        already bounds every request, and spans are estimated and split in the space of key
        suffixes, where a bound outside the prefix has no spelling (it read as the empty
        suffix, so a prefix's one span looked empty and was never split).
        """
        end = None
        if include_temp:
            return [(prefix, end)]
        if prefix.startswith(TEMP_PREFIX):
            return []
        if TEMP_PREFIX.startswith(prefix):
            # Skip the temporary objects by range instead of filtering them name by name.
            return [(prefix, TEMP_PREFIX), (prefix_end(TEMP_PREFIX), end)]
        return [(prefix, end)]

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

    async def _page(self, span: Span) -> dict:
        params = {"maxResults": str(self.page_size), "fields": LIST_FIELDS}
        if self.prefix:
            params["prefix"] = self.prefix
        end = span.end
        if span.token is not None and span.token_query[1] == end:
            params["pageToken"] = span.token
            start = span.token_query[0]
        else:
            # No token yet, or one issued before a split moved our end: (re)start from the
            # last name (startOffset is inclusive; `_drain` drops that name if it comes back).
            start = span.lo
        if start and start != self.prefix:
            params["startOffset"] = start
        if end is not None:
            params["endOffset"] = end
        resp = await http.request(self.fs, "GET", self.url, op="list", what=self.what, params=params)
        page = resp.json()
        page["_query"] = (start, end)
        return page

    async def _drain(self, span: Span) -> None:
        while not span.done:
            end = span.end
            page = await self._page(span)
            items = page.get("items") or []
            token = page.get("nextPageToken")
            new_end = span.end
            last = span.last
            if items:
                first_name, last_name = items[0]["name"], items[-1]["name"]
                if not ((last is None or first_name > last) and (new_end is None or last_name < new_end)):
                    items = [it for it in items if (last is None or it["name"] > last)
                             and (new_end is None or it["name"] < new_end)]
            hit_end = new_end is not None and bool(page.get("items")) and page["items"][-1]["name"] >= new_end
            if items:
                ref = items[0]["name"] if len(items) > 1 else span.lo
                span.density = (ref, items[-1]["name"], max(1, len(items) - 1))
                span.last = items[-1]["name"]
                # Sampled names (16 per page) teach each position's characters; cheap enough per page.
                step = max(1, len(items) // 16)
                n = len(self.prefix)
                self.alphabets.learn([it["name"][n:] for it in items[::step]] + [span.last[n:]])
            if token is None or hit_end:
                span.done = True
            elif new_end != end:
                span.token = None   # our end moved: restart from `last` with the new endOffset
            else:
                span.token, span.token_query = token, page["_query"]
            if span.done:
                self.active.discard(span)
            span.remaining = self._estimate(span)
            self._notify()
            if items:
                await self._emit(span, items)
        if self.sort:
            await self._emit(span, [])

    async def _emit(self, span: Span, items: list[dict]) -> None:
        # The only per-object work of the lister (~40% of a listing's client CPU), kept to what
        # gcsfs's info shape needs; timestamps are parsed only when asked (`find`), once per
        # distinct string. GCS always sends the fields we ask for, so no .get() per field.
        prefix = self.name_prefix
        mtimes = self.mtimes
        if mtimes is None:
            for it in items:
                it["name"] = prefix + it["name"]
                it["size"] = int(it["size"])
                it["type"] = "file"
        else:
            for it in items:
                it["name"] = prefix + it["name"]
                it["size"] = int(it["size"])
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


def split_listing_path(fs: "FluxFileSystem", path: str, prefix: str = "") -> tuple[str, str]:
    """(bucket, key prefix) for a listing of `path` treated as a directory, plus `prefix` (gcsfs's rule)."""
    bucket, key, _ = fs.split_path(path)
    if not bucket:
        raise ValueError(f"cannot list {path!r}: no bucket named")
    key = key.rstrip("/")
    return bucket, (key + "/" if key else "") + prefix


def _make_progress(progress: Any, what: str):
    """None/False: quiet; True: a tqdm total-count bar on stderr; else an object with update(n)."""
    if progress is None or progress is False:
        return None, False
    if progress is True:
        from tqdm.auto import tqdm

        return tqdm(desc=f"listing {what}", unit=" obj", unit_scale=True, leave=False), True
    return progress, False


async def iter_objects(
    fs: "FluxFileSystem",
    path: str,
    prefix: str = "",
    sort: bool = False,
    batch_size: int | None = None,
    *,
    concurrency: int | None = None,
    page_size: int | None = None,
    include_temp: bool = False,
    progress: Any = None,
    mtime: bool = False,
) -> AsyncIterator[list[dict]]:
    """Batches of info dicts (gcsfs shape) for every object under `path`/ + `prefix`, as they arrive.

    `path` is a bucket or a "directory" in it; `prefix` is a raw key prefix below it, so
    ``("bkt", prefix="img_")`` lists keys starting with ``img_``. Unsorted by default (pages
    come out as workers fetch them); ``sort=True`` yields names in ascending order, still
    streaming. Batches are whole pages unless `batch_size` regroups them. Temporary objects
    of fluxfs (under `TEMP_PREFIX`) are left out unless `include_temp`. `mtime=True` adds gcsfs's
    "mtime" (UTC datetime from "updated"), as `find` returns it. Closing the iterator
    early cancels the listing.
    """
    if batch_size is not None and batch_size < 1:
        raise ValueError(f"batch_size must be at least 1, not {batch_size}")
    bucket, key_prefix = split_listing_path(fs, path, prefix)
    concurrency = concurrency or fs.options.list_concurrency
    page_size = page_size or fs.options.list_page_size
    if not 1 <= page_size <= 1000:
        raise ValueError(f"page_size must be between 1 and 1000 (GCS's cap), not {page_size}")
    if progress is None:
        progress = fs.options.progress or None
    bar, own_bar = _make_progress(progress, f"{bucket}/{key_prefix}")
    lister = Lister(fs, bucket, key_prefix, concurrency=concurrency, page_size=page_size, sort=sort,
                    include_temp=include_temp, progress=bar, queue_size=max(8, 2 * concurrency), mtime=mtime)
    task = asyncio.ensure_future(lister.run())
    try:
        held: list[dict] = []
        while True:
            batch = await lister.queue.get()
            if batch is _DONE:
                break
            if isinstance(batch, BaseException):
                raise batch
            if batch_size is None:
                yield batch
                continue
            held.extend(batch)
            while len(held) >= batch_size:
                out, held = held[:batch_size], held[batch_size:]
                yield out
        if held:
            yield held
        await task
    finally:
        if not task.done():
            task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task
        if own_bar:
            bar.close()


async def list_all(fs: "FluxFileSystem", path: str, prefix: str = "", sort: bool = True, **kwargs: Any) -> list[dict]:
    """Every info dict under `path`/ + `prefix` in one list (sorted by name unless sort=False).

    kwargs go to `iter_objects` (concurrency, page_size, include_temp, progress, mtime).
    """
    batches: list[list[dict]] = []
    # Unsorted streaming, one sort at the end: no worker waits for the lowest span to drain
    # as in sorted streaming.
    async for batch in iter_objects(fs, path, prefix, sort=False, **kwargs):
        batches.append(batch)
    return _concat(batches, sort)


_name = operator.itemgetter("name")


def _concat(batches: list[list[dict]], sort: bool) -> list[dict]:
    """The batches as one list, sorted by name if asked.

    Each batch is a sorted run and the runs cover disjoint key ranges (spans partition the
    key space and each is paged in order), so ordering the runs by their first name already
    sorts the whole; the final timsort then only confirms one run (n comparisons, not
    n log(runs)), and still sorts correctly should a server ever return a page out of order.
    """
    if sort:
        batches.sort(key=lambda b: b[0]["name"])
    out = [it for b in batches for it in b] if len(batches) != 1 else batches[0]
    if sort:
        out.sort(key=_name)
    return out


async def find(fs: "FluxFileSystem", path: str, maxdepth: int | None = None, withdirs: bool = False,
               detail: bool = False, prefix: str = "", update_cache: bool = True) -> Any:
    """What gcsfs's `_find` returns for the same bucket, from the parallel lister.

    Like gcsfs: list `path` as a directory; if that finds nothing, `path` may be an object
    itself; fill the dircache from the flat listing (not when `prefix` makes it partial).
    """
    path = fs._strip_protocol(path)
    if maxdepth is not None and maxdepth < 1:
        raise ValueError("maxdepth must be at least 1")
    objects = await list_all(fs, path, prefix, mtime=True)
    bucket, key, _ = fs.split_path(path)
    if not objects and key and not prefix:
        # gcsfs then lists with the key itself as prefix and keeps only an exact match:
        # the smallest key starting with `key` is `key`, so one single-result page answers it.
        page = await http.request(fs, "GET", fs.json_url("b/{}/o", bucket), op="list", what=path,
                                  params={"prefix": key, "maxResults": "1", "fields": LIST_FIELDS})
        items = [it for it in (page.json().get("items") or []) if it["name"] == key]
        for it in items:
            it["name"], it["size"], it["type"] = f"{bucket}/{key}", int(it.get("size", 0)), "file"
        add_mtimes(items)
        objects = items
    dirs = fill_dircache(fs, path, objects, prefix=prefix, update_cache=update_cache)
    if withdirs:
        objects = sorted(objects + list(dirs.values()), key=lambda o: o["name"])
    if maxdepth:
        depth = path.rstrip("/").count("/") + maxdepth
        objects = [o for o in objects if o["name"].count("/") <= depth]
    if detail:
        return {o["name"]: o for o in objects}
    return [o["name"] for o in objects]


_UTC = datetime.timezone.utc


def add_mtimes(objects: list[dict], parsed: dict[str, datetime.datetime] | None = None) -> None:
    """Set gcsfs's "mtime" (a UTC datetime) from "updated" where missing, as gcsfs's `_process_object` does.

    Objects written together share their timestamp strings, so each distinct string is
    parsed once (gcsfs parses each object's: ~2.5 us, 2.5 s of CPU per million objects);
    `parsed` carries that cache across calls.
    """
    if parsed is None:
        parsed = {}
    for o in objects:
        ts = o.get("updated")
        if ts is None or "mtime" in o:
            continue
        t = parsed.get(ts)
        if t is None:
            t = parsed[ts] = _parse_timestamp(ts)
        o["mtime"] = t


class _Timestamps(dict):
    """"updated" string -> parsed UTC datetime, parsing each distinct string on first lookup."""

    def __missing__(self, ts: str | None) -> datetime.datetime | None:
        t = self[ts] = None if ts is None else _parse_timestamp(ts)
        return t


def _parse_timestamp(ts: str) -> datetime.datetime:
    """RFC 3339 "...Z" -> aware UTC datetime, equal to what gcsfs's `_parse_timestamp` gives."""
    if not ts.endswith("Z"):
        raise ValueError(f"unexpected timestamp {ts!r}: GCS timestamps end with 'Z'")
    # fromisoformat (3.11) takes any number of fraction digits; drop 'Z' and pin UTC explicitly.
    return datetime.datetime.fromisoformat(ts[:-1]).replace(tzinfo=_UTC)


def _parent(name: str) -> str:
    return name.rpartition("/")[0]


def _parent_runs(names: list[str], chunk: int = 512) -> list[tuple[int, int, str]]:
    """Maximal runs of consecutive names with one parent, as (start, stop, parent).

    Chunk by chunk: when a sorted chunk's first and last names have the same parent P and,
    all together, no more '/' than that, every name between them has parent P (names
    sorted between "P/x" and "P/y" start with "P/"): one join and count in C instead of a
    split per name. Other chunks are split name by name.
    """
    runs: list[tuple[int, int, str]] = []
    cur, cur_start = None, 0
    n = len(names)
    for lo in range(0, n, chunk):
        hi = min(n, lo + chunk)
        block = names[lo:hi]
        p = block[0].rpartition("/")[0]
        if (block[-1].rpartition("/")[0] == p and "".join(block).count("/") == len(block) * block[0].count("/")
                and block == sorted(block)):
            if p != cur:
                if cur is not None:
                    runs.append((cur_start, lo, cur))
                cur, cur_start = p, lo
            continue
        for i, name in enumerate(block, lo):
            q = name.rpartition("/")[0]
            if q != cur:
                if cur is not None:
                    runs.append((cur_start, i, cur))
                cur, cur_start = q, i
    if cur is not None:
        runs.append((cur_start, n, cur))
    return runs


class _Listing:
    """One directory's dircache listing being built: entries in first-seen order, first one per name wins.

    Long runs of sorted file names are kept as slices, not inserted name by name in a dict
    (a 1M-name dict costs ~0.3 s to build); membership in them is a bisection.
    """

    __slots__ = ("index", "parts", "run_firsts", "runs", "last_is_run")

    def __init__(self):
        self.index: dict = {}              # name -> entry, for entries added one by one
        self.parts: list = []              # lists of entries, in order
        self.run_firsts: list[str] = []    # first name of each run (runs ascend and do not overlap)
        self.runs: list[list[str]] = []
        self.last_is_run = False

    def __contains__(self, name: str) -> bool:
        if name in self.index:
            return True
        i = bisect.bisect_right(self.run_firsts, name) - 1
        if i < 0:
            return False
        run = self.runs[i]
        j = bisect.bisect_left(run, name)
        return j < len(run) and run[j] == name

    def add(self, name: str, entry: dict) -> None:
        self.index[name] = entry
        if self.parts and not self.last_is_run:
            self.parts[-1].append(entry)
        else:
            self.parts.append([entry])
            self.last_is_run = False

    def add_run(self, names: list[str], entries: list[dict]) -> None:
        """Names strictly ascending, above every run added before, none present yet."""
        self.run_firsts.append(names[0])
        self.runs.append(names)
        self.parts.append(entries)
        self.last_is_run = True

    def entries(self) -> list[dict]:
        return self.parts[0] if len(self.parts) == 1 else [e for part in self.parts for e in part]


_RUN_MIN = 64   # shorter runs are added name by name


def fill_dircache(fs: "FluxFileSystem", path: str, objects: list[dict], prefix: str = "",
                  update_cache: bool = True, run_min: int = _RUN_MIN) -> dict:
    """gcsfs's `_get_dirs_and_update_cache` for file infos sorted by name (as `find` lists them):
    the same pseudo-directories and dircache, a small fraction of the CPU.

    gcsfs calls `_parent`/`split_path` (protocol stripping, URL parsing) for every object
    and walks its ancestors: ~7 us per object, 7 s of CPU for a 1M-object find. Names here
    are plain "bucket/key", so string splits give the same parents; and in a sorted listing
    objects come in runs sharing one parent. Only a run's first object needs gcsfs's walk up
    the ancestors: for the others that walk would only file the object in its parent's
    listing (the ancestors are filed already), which is done for the whole run at once.
    """
    dirs: dict = {}
    cache_entries: dict[str, _Listing] = {}
    full_prefix = path.rstrip("/") + "/" + prefix if prefix else ""
    root_len = len(path.rstrip("/"))
    should_update = bool(not prefix and update_cache)
    names = [o["name"] for o in objects]

    def walk(obj: dict, parent: str) -> tuple[_Listing | None, bool]:
        """gcsfs's walk up from one object -> (its parent's listing, whether the object itself went higher)."""
        previous, first_listing, went_higher, first = obj, None, False, True
        while parent:
            if len(parent) < root_len:
                break
            if prefix and not parent.startswith(full_prefix):
                break
            seen = parent in dirs
            if not seen:
                dir_key = parent.split("/", 1)[1] if "/" in parent else ""
                if dir_key:
                    dirs[parent] = {"Key": dir_key, "Size": 0, "name": parent, "StorageClass": "DIRECTORY",
                                    "type": "directory", "size": 0}
            if should_update:
                listing = cache_entries.get(parent)
                if listing is None:
                    listing = cache_entries[parent] = _Listing()
                if first:
                    first_listing = listing
                elif previous is obj:
                    went_higher = True
                child = previous["name"]
                if child not in listing:
                    listing.add(child, previous)
                elif seen:
                    break
            elif seen:
                break
            first = False
            if parent in dirs:
                previous = dirs[parent]
            parent = _parent(parent)
        return first_listing, went_higher

    for start, stop, parent in _parent_runs(names):
        run_listing, went_higher = walk(objects[start], parent)
        if stop - start == 1:
            continue
        if went_higher:
            # The parent is no directory entry (e.g. "bkt/" of key "/x"): gcsfs files each
            # object in the grandparent's listing too; walk them one by one.
            for i in range(start + 1, stop):
                walk(objects[i], parent)
        elif run_listing is not None:
            if stop - start - 1 >= run_min:
                # Sorted unique names: none of these is in the listing yet (a directory entry
                # "P/x" only comes from names "P/x/..." that sort after the file "P/x").
                run_listing.add_run(names[start + 1:stop], objects[start + 1:stop])
            else:
                for i in range(start + 1, stop):
                    if names[i] not in run_listing:
                        run_listing.add(names[i], objects[i])
    if should_update:
        fs.dircache.update({k: v.entries() for k, v in cache_entries.items()})
    return dirs

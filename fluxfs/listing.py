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
are split, the victim keeps at least its in-flight page, and every split key is checked
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
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, AsyncIterator, Iterable

from sortedcontainers import SortedKeyList

from . import http
from .tempnames import TEMP_PREFIX

if TYPE_CHECKING:  # pragma: no cover
    from .core import FluxFileSystem

# Pages in flight. Measured with `python -m bench listing --profile cloud --objects 100000
# --concurrency 4,8,16,32,64,128` (30 ms per page, client and server on 2 shared cores):
# 20k, 33k, 37k, 31k, 26k, 29k objects/s. 8 pages in flight already hide the 30 ms; past 16
# the server's CPU is the limit and more workers only add splits (each costs one partial
# page). Against real GCS (server CPU not ours) more may pay: set `list_concurrency`.
DEFAULT_CONCURRENCY = 16

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
        v = 0
        for i, r in enumerate(self.radices):
            v = v * r + (self._digit(i, s[i]) if i < len(s) else 0)
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

    def learn(self, keys: Iterable[str]) -> None:
        sets = self.sets
        for k in keys:
            if len(k) > len(sets):
                sets.extend(set() for _ in range(len(k) - len(sets)))
            for i, c in enumerate(k):
                sets[i].add(c)

    def space(self) -> KeySpace:
        """A KeySpace over the learned positions (split keys are never learned: they are not names)."""
        return KeySpace(self.sets)


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
    done: bool = False
    buffer: list = field(default_factory=list)   # sorted mode: listed, not yet emitted

    @property
    def lo(self) -> str:
        return self.last if self.last is not None else self.start


_INF = float("inf")
_DONE = object()


class Lister:
    """Lists one bucket prefix with `concurrency` workers and puts batches of info dicts on `queue`."""

    def __init__(self, fs: "FluxFileSystem", bucket: str, prefix: str, *, concurrency: int, page_size: int,
                 sort: bool, include_temp: bool, progress: Any, queue_size: int):
        self.fs = fs
        self.bucket = bucket
        self.prefix = prefix
        self.concurrency = max(1, int(concurrency))
        self.page_size = page_size
        self.sort = sort
        self.progress = progress
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
        """The prefix's key range, minus fluxfs's temporary prefix unless asked for."""
        end = prefix_end(prefix)
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
        candidates = [s for s in self.active if s.last is not None and s.remaining is not None
                      and s.remaining >= self.min_split]
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
                # Sampled names (32 per page) teach each position's characters; cheap enough per page.
                step = max(1, len(items) // 32)
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
        prefix = self.name_prefix
        for it in items:
            it["name"] = prefix + it["name"]
            it["size"] = int(it.get("size", 0))
            it["type"] = "file"
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
) -> AsyncIterator[list[dict]]:
    """Batches of info dicts (gcsfs shape) for every object under `path`/ + `prefix`, as they arrive.

    `path` is a bucket or a "directory" in it; `prefix` is a raw key prefix below it, so
    ``("bkt", prefix="img_")`` lists keys starting with ``img_``. Unsorted by default (pages
    come out as workers fetch them); ``sort=True`` yields names in ascending order, still
    streaming. Batches are whole pages unless `batch_size` regroups them. Temporary objects
    of fluxfs (under `TEMP_PREFIX`) are left out unless `include_temp`. Closing the iterator
    early cancels the listing.
    """
    if batch_size is not None and batch_size < 1:
        raise ValueError(f"batch_size must be at least 1, not {batch_size}")
    bucket, key_prefix = split_listing_path(fs, path, prefix)
    concurrency = concurrency or fs.list_concurrency or DEFAULT_CONCURRENCY
    page_size = page_size or fs.list_page_size
    if not 1 <= page_size <= 1000:
        raise ValueError(f"page_size must be between 1 and 1000 (GCS's cap), not {page_size}")
    if progress is None:
        progress = fs.progress or None
    bar, own_bar = _make_progress(progress, f"{bucket}/{key_prefix}")
    lister = Lister(fs, bucket, key_prefix, concurrency=concurrency, page_size=page_size, sort=sort,
                    include_temp=include_temp, progress=bar, queue_size=max(8, 2 * concurrency))
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
    """Every info dict under `path`/ + `prefix` in one list (sorted by name unless sort=False)."""
    out: list[dict] = []
    # Unsorted streaming, one sort at the end: pages are sorted runs, which timsort merges
    # cheaply, and no worker waits for the lowest span to drain as in sorted streaming.
    async for batch in iter_objects(fs, path, prefix, sort=False, **kwargs):
        out.extend(batch)
    if sort:
        out.sort(key=_name)
    return out


def _name(info: dict) -> str:
    return info["name"]


async def find(fs: "FluxFileSystem", path: str, maxdepth: int | None = None, withdirs: bool = False,
               detail: bool = False, prefix: str = "", update_cache: bool = True) -> Any:
    """What gcsfs's `_find` returns for the same bucket, from the parallel lister.

    Like gcsfs: list `path` as a directory; if that finds nothing, `path` may be an object
    itself; fill the dircache from the flat listing (not when `prefix` makes it partial).
    """
    path = fs._strip_protocol(path)
    if maxdepth is not None and maxdepth < 1:
        raise ValueError("maxdepth must be at least 1")
    objects = await list_all(fs, path, prefix)
    bucket, key, _ = fs.split_path(path)
    if not objects and key and not prefix:
        # gcsfs then lists with the key itself as prefix and keeps only an exact match:
        # the smallest key starting with `key` is `key`, so one single-result page answers it.
        page = await http.request(fs, "GET", fs.json_url("b/{}/o", bucket), op="list", what=path,
                                  params={"prefix": key, "maxResults": "1", "fields": LIST_FIELDS})
        items = [it for it in (page.json().get("items") or []) if it["name"] == key]
        for it in items:
            it["name"], it["size"], it["type"] = f"{bucket}/{key}", int(it.get("size", 0)), "file"
        objects = items
    for o in objects:
        if "updated" in o and "mtime" not in o:
            o["mtime"] = fs._parse_timestamp(o["updated"])
    dirs = fill_dircache(fs, path, objects, prefix=prefix, update_cache=update_cache)
    if withdirs:
        objects = sorted(objects + list(dirs.values()), key=lambda o: o["name"])
    if maxdepth:
        depth = path.rstrip("/").count("/") + maxdepth
        objects = [o for o in objects if o["name"].count("/") <= depth]
    if detail:
        return {o["name"]: o for o in objects}
    return [o["name"] for o in objects]


def _parent(name: str) -> str:
    return name.rsplit("/", 1)[0] if "/" in name else ""


def fill_dircache(fs: "FluxFileSystem", path: str, objects: list[dict], prefix: str = "",
                  update_cache: bool = True) -> dict:
    """gcsfs's `_get_dirs_and_update_cache`, same results, ~5x less CPU per object.

    gcsfs calls `_parent`/`split_path` (protocol stripping, URL parsing) for every object,
    7 us each: 7 s of CPU for a 1M-object find. Names here are plain "bucket/key", so
    string splits give the same parents.
    """
    dirs: dict = {}
    cache_entries: dict = {}
    full_prefix = path.rstrip("/") + "/" + prefix if prefix else ""
    root_len = len(path.rstrip("/"))
    should_update = bool(not prefix and update_cache)
    for obj in objects:
        if should_update and obj.get("type") == "directory":
            cache_entries.setdefault(obj["name"], {})
        parent = _parent(obj["name"])
        previous = obj
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
                listing = cache_entries.setdefault(parent, {})
                name = previous["name"]
                if name not in listing:
                    listing[name] = previous
                elif seen:
                    break
            elif seen:
                break
            if parent in dirs:
                previous = dirs[parent]
            parent = _parent(parent)
    if should_update:
        fs.dircache.update({k: list(v.values()) for k, v in cache_entries.items()})
    return dirs

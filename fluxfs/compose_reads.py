"""Batched reads of many small objects through temporary composites (compose, one GET, slice, delete).

Up to 32 small objects (GCS's compose limit) are composed server-side into a temporary
object under `tempnames.TEMP_PREFIX`, downloaded in one GET and sliced back by the sizes
from listing: 32 GETs become 3 requests (compose, GET, delete). Correctness does not rest
on the listing being fresh:

* every source is pinned to its listed generation (``sourceObjects[].generation`` and
  ``objectPreconditions.ifGenerationMatch``), so a composite cannot mix versions: a changed
  or vanished object makes the compose fail (412/404);
* every slice is checked against the listed crc32c, which also catches servers that ignore
  the pins (fake-gcs-server) and misaligned slices (objects listed without a crc32c are
  therefore never composed);
* whatever fails falls back to a direct read of the current object (fresh metadata from the
  response headers, verified against its own crc32c).

Temporary objects are registered with `temporaries` before they can exist and deleted in the
background (deletes never hold up reads); a batch waits for its deletes before returning,
and cancellation deletes what was created before re-raising.
"""
from __future__ import annotations

import asyncio
import collections
import logging
import time
import warnings
from typing import TYPE_CHECKING, Any, Iterable, Optional, Union

import google_crc32c

from . import temporaries
from .gcs import http, tempnames
from .gcs.chunks import Chunked
from .errors import HttpError, PreconditionFailed, RetryableError
from .gcs.checksums import crc_from_b64
from .read_file import DEFAULT_CHUNK, get_chunks, read_object

if TYPE_CHECKING:  # pragma: no cover
    from .core import FluxFileSystem

logger = logging.getLogger("fluxfs.compose_reads")

# GCS composes at most 32 sources per call.
MAX_SOURCES = 32
# Deletes run beside the reads on their own budget; with 64 readers this stays under
# aiohttp's 100-connection default, so a backlog of deletes never takes a reader's socket.
DELETE_CONCURRENCY = 32

Result = Union[bytes, BaseException]


class _Obj:
    """One requested object: where it is, what listing said about it."""

    __slots__ = ("path", "bucket", "key", "size", "generation", "crc")

    def __init__(self, path: str, bucket: str, key: str, size: Optional[int], generation: Optional[str],
                 crc: Optional[int]):
        self.path, self.bucket, self.key = path, bucket, key
        self.size, self.generation, self.crc = size, generation, crc


def compose_on(fs: "FluxFileSystem") -> bool:
    """Whether batched reads compose: the `compose` option, unless the server refused it (403)."""
    return fs.options.compose and fs.options.max_composite_size > 0 and not fs._compose_denied


def _deny_compose(fs: "FluxFileSystem", exc: BaseException) -> None:
    """Compose (or deleting its temporaries) is forbidden: turn it off for this filesystem, warn once."""
    if not fs._compose_denied:
        fs._compose_denied = True
        warnings.warn(f"fluxfs: compose is not permitted ({exc}); reading objects directly from now on",
                      RuntimeWarning, stacklevel=2)


def to_objs(infos: Iterable[dict]) -> list[_Obj]:
    """Info dicts (name "bucket/key", size, generation, crc32c) as `_Obj`, duplicates dropped."""
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
        size = info.get("size")
        gen = info.get("generation")
        out.append(_Obj(name, bucket, key, int(size) if size is not None else None,
                        str(gen) if gen not in (None, "") else None, crc_from_b64(info.get("crc32c"))))
    return out


def plan(objs: list[_Obj], cap: int, threshold: int) -> tuple[list[list[_Obj]], list[_Obj]]:
    """Split into composite groups (<= 32 sources, <= cap bytes, never over) and direct reads.

    Objects without size, generation or crc32c, above `threshold`, and groups of one are read
    directly. The crc32c is required because it is what checks each slice: a server that ignores
    the generation pins (fake-gcs-server) would otherwise hand back misaligned slices unnoticed
    when one object grows as another shrinks. Consecutive objects of one bucket share a group,
    so input order keeps data locality.
    """
    groups: list[list[_Obj]] = []
    direct: list[_Obj] = []
    open_groups: dict[str, tuple[list[_Obj], int]] = {}
    for o in objs:
        if o.size is None or o.generation is None or o.crc is None or o.size > threshold:
            direct.append(o)
            continue
        cur, total = open_groups.get(o.bucket, (None, 0))
        if cur is None or len(cur) >= MAX_SOURCES or total + o.size > cap:
            cur, total = [], 0
            groups.append(cur)
        cur.append(o)
        open_groups[o.bucket] = (cur, total + o.size)
    singles = [g[0] for g in groups if len(g) == 1]
    return [g for g in groups if len(g) > 1], direct + singles


class _Batch:
    """One `cat_objects` call: a queue of jobs worked by `concurrency` workers."""

    def __init__(self, fs: "FluxFileSystem", concurrency: int):
        self.fs = fs
        self.results: dict[str, Result] = {}
        self.jobs: collections.deque = collections.deque()
        self.concurrency = concurrency
        self.reg = temporaries.registry(fs)
        self.mine: dict[str, Optional[str]] = {}      # temporaries of this batch not yet deleted
        self.composing: set[asyncio.Task] = set()   # compose requests (shielded: their outcome matters)
        self.deleting: set[asyncio.Task] = set()
        self.delete_sem = asyncio.Semaphore(DELETE_CONCURRENCY)
        self.stats = collections.Counter()
        self.active = 0
        self.wake = asyncio.Event()

    # -- jobs ---------------------------------------------------------------------------

    async def worker(self) -> None:
        # Idle workers wait while others are busy: a failed group re-queues its objects as
        # direct reads, and those should spread over all workers.
        while True:
            if self.jobs:
                kind, item = self.jobs.popleft()
                self.active += 1
                try:
                    if kind == "group":
                        await self.read_group(item)
                    else:
                        await self.read_direct(item)
                finally:
                    self.active -= 1
                    self.wake.set()
            elif self.active == 0:
                return
            else:
                self.wake.clear()
                await self.wake.wait()

    async def read_direct(self, o: _Obj) -> None:
        """Plain GET (parallel ranges when large) of the current object, checked against its crc32c."""
        try:
            got = await read_object(self.fs, o.bucket, o.key, size_hint=o.size)
        except asyncio.CancelledError:
            raise
        except FileNotFoundError as exc:
            self._forget(o)
            self.results[o.path] = exc  # its message names bucket/key
            return
        except Exception as exc:  # noqa: BLE001 - per-object outcome, follows on_error
            self.results[o.path] = exc
            return
        if o.generation is not None and got.generation is not None and got.generation != o.generation:
            self._forget(o)  # the listing cache is stale for this object
        self.stats["direct"] += 1
        self.results[o.path] = got.body

    def _forget(self, o: _Obj) -> None:
        try:
            self.fs.invalidate_cache(o.path)
        except Exception:  # noqa: BLE001 - cache hygiene only
            pass

    def fallback(self, objs: Iterable[_Obj]) -> None:
        """Read these directly, with fresh metadata, by the next free worker."""
        for o in objs:
            self.stats["fallback"] += 1
            self.jobs.append(("one", o))
        self.wake.set()

    async def read_group(self, group: list[_Obj]) -> None:
        fs = self.fs
        bucket = group[0].bucket
        if not compose_on(fs):  # compose was turned off meanwhile (403)
            self.fallback(group)
            return
        key = tempnames.temp_key(fs.job_id, "compose")
        tpath = f"{bucket}/{key}"
        # Registered before the compose is sent: if we die mid-request, the atexit hook still knows it.
        self.reg.add(tpath)
        self.mine[tpath] = None
        expected = sum(o.size for o in group)
        task = asyncio.ensure_future(self._compose(bucket, key, group))
        self.composing.add(task)
        task.add_done_callback(self.composing.discard)
        body = None
        try:
            # Shielded: a cancelled batch still learns whether the composite exists, then deletes it.
            meta = await asyncio.shield(task)
            gen = str(meta.get("generation")) if meta.get("generation") is not None else None
            self.mine[tpath] = gen
            self.reg.set_generation(tpath, gen)
            if int(meta.get("size", -1)) != expected:
                # The server ignored a generation pin and an object changed size.
                self.stats["size_mismatch"] += 1
            elif expected:
                # Kept as aiohttp's chunks: the slices are cut from them, not from a joined copy.
                body = (await get_chunks(fs, bucket, key, 0, expected, generation=gen)).chunks
            else:
                body = []  # only empty objects: nothing to download
        except asyncio.CancelledError:
            raise
        except PermissionError as exc:
            _deny_compose(fs, exc)
        except Exception as exc:  # noqa: BLE001 - 412/404 (changed/vanished), faults after retries, ...
            self.stats[f"compose_failed:{type(exc).__name__}"] += 1
        finally:
            if task.done():
                self._composed(task, tpath)
            else:
                task.add_done_callback(lambda t: self._composed(t, tpath))
        if body is None or sum(map(len, body)) != expected:
            self.fallback(group)
            return
        self.stats["composed"] += len(group)
        self._slice(group, body)

    def _slice(self, group: list[_Obj], chunks: list[bytes]) -> None:
        bad = []
        results = self.results
        value = google_crc32c.value
        for o, piece in zip(group, _pieces(chunks, [o.size for o in group])):
            if o.crc is not None and value(piece) != o.crc:
                bad.append(o)
            else:
                results[o.path] = piece
        if bad:
            # Changed behind an unpinned compose, or corrupted: the current bytes come from a direct read.
            self.stats["crc_mismatch"] += len(bad)
            self.fallback(bad)

    async def _compose(self, bucket: str, key: str, group: list[_Obj]) -> dict:
        body = {
            "sourceObjects": [
                {"name": o.key, "generation": int(o.generation),
                 "objectPreconditions": {"ifGenerationMatch": int(o.generation)}}
                for o in group
            ],
            "destination": {"contentType": "application/octet-stream"},
        }
        # Safe to retry: the destination name is unique to this group and the sources are pinned.
        resp = await http.request(self.fs, "POST", self.fs.json_url("b/{}/o/{}/compose", bucket, key),
                                  op="compose", what=f"{bucket}/{key}", json=body,
                                  params={"fields": "generation,size"})  # a partial response: less to send and parse
        return resp.json()

    # -- deletes ------------------------------------------------------------------------

    def _composed(self, task: asyncio.Task, tpath: str) -> None:
        """The compose answered: delete the composite, unless the answer proves it was never made."""
        exc = None if task.cancelled() else task.exception()
        if isinstance(exc, (PreconditionFailed, FileNotFoundError, PermissionError)) or (
                isinstance(exc, HttpError) and not isinstance(exc, RetryableError)):
            self.mine.pop(tpath, None)
            self.reg.discard(tpath)
            return
        self._schedule_delete(tpath)

    def _schedule_delete(self, tpath: str) -> None:
        t = asyncio.ensure_future(self._delete(tpath))
        self.deleting.add(t)
        t.add_done_callback(self.deleting.discard)

    async def _delete(self, tpath: str) -> None:
        async with self.delete_sem:
            gen = self.mine.get(tpath)
            try:
                ok = await temporaries.delete(self.fs, tpath, gen, raise_denied=True)
            except PermissionError as exc:
                _deny_compose(self.fs, exc)
                ok = False
            if ok:
                self.mine.pop(tpath, None)

    async def finish(self) -> None:
        """Wait for composes still answering and for every delete of this batch."""
        while self.composing or self.deleting:
            await asyncio.gather(*self.composing, *self.deleting, return_exceptions=True)
        # Deletes that failed even after retries stay registered for the atexit hook.

    async def run(self) -> None:
        workers = [asyncio.ensure_future(self.worker()) for _ in range(min(self.concurrency, len(self.jobs)))]
        try:
            await asyncio.gather(*workers)
        finally:
            for w in workers:
                w.cancel()
            await asyncio.gather(*workers, return_exceptions=True)
            # Cleanup must complete even if we are being cancelled: shield it and wait.
            cleanup_task = asyncio.ensure_future(self.finish())
            try:
                await asyncio.shield(cleanup_task)
            except asyncio.CancelledError:
                await asyncio.shield(cleanup_task)
                raise


def _pieces(chunks: list[bytes], sizes: list[int]) -> Iterable[bytes]:
    """Cut consecutive pieces of `sizes` bytes out of a body received as `chunks`, one copy per byte.

    The sizes add up to the body's length (the caller asked for exactly that many bytes).
    """
    body = Chunked(chunks)
    off = 0
    for n in sizes:
        # A view inside one chunk (bytes() copies it once) or a copy joined from several.
        yield bytes(body.slice(off, off + n))
        off += n


async def cat_objects(fs: "FluxFileSystem", infos: Iterable[dict], on_error: str = "raise") -> dict[str, Result]:
    """Read many objects given their listing info; returns {"bucket/key": bytes | exception}.

    `on_error`: "raise" the first failure (FileNotFoundError naming a vanished object),
    "omit" failed paths, or "return" their exceptions in the dict, like fsspec's `cat`.
    """
    if on_error not in ("raise", "omit", "return"):
        raise ValueError(f"on_error must be 'raise', 'omit' or 'return', not {on_error!r}")
    objs = to_objs(infos)
    opts = fs.options
    if compose_on(fs):
        cap = opts.max_composite_size
        groups, direct = plan(objs, cap, min(opts.compose_threshold, cap))
    else:
        groups, direct = [], objs
    batch = _Batch(fs, opts.read_concurrency)
    # Groups first: each keeps up to 3 requests busy, the direct reads fill in behind them.
    batch.jobs.extend(("group", g) for g in groups)
    batch.jobs.extend(("one", o) for o in direct)
    t0 = time.perf_counter()
    await batch.run()
    logger.debug("cat_objects: %d objects in %.3fs %s", len(objs), time.perf_counter() - t0, dict(batch.stats))
    results = batch.results
    out: dict[str, Result] = {}
    for o in objs:
        r = results[o.path]
        if isinstance(r, BaseException):
            if on_error == "raise":
                raise r
            if on_error == "omit":
                continue
        out[o.path] = r
    return out


# -- metadata for plain paths ---------------------------------------------------------------

def _cached_infos(fs: "FluxFileSystem", paths: list[str]) -> tuple[dict[str, dict], list[str]]:
    """Infos from fsspec's listing cache (filled by find/ls), and the paths it does not know."""
    found: dict[str, dict] = {}
    missing: list[str] = []
    by_parent: dict[str, Optional[dict[str, dict]]] = {}
    for p in paths:
        parent = p.rsplit("/", 1)[0]
        index = by_parent.get(parent, False)
        if index is False:
            listing = fs.dircache.get(parent)
            index = {i["name"].rstrip("/"): i for i in listing} if listing else None
            by_parent[parent] = index
        info = index.get(p) if index else None
        if info is None and p in fs.dircache:  # a prefix with a listing of its own
            info = {"name": p, "size": 0, "type": "directory"}
        if info is not None and (info.get("generation") is not None or info.get("type") == "directory"):
            found[p] = info
        else:
            missing.append(p)
    return found, missing


def _common_prefix(a: str, b: str) -> str:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return a[:n]


async def _list_range(fs: "FluxFileSystem", bucket: str, keys: list[str], end: Optional[str],
                      max_pages: int) -> dict[str, dict]:
    """List [keys[0], end) under their common prefix; infos of the wanted keys found in at most `max_pages`."""
    wanted = set(keys)
    last = keys[-1]
    prefix = _common_prefix(keys[0], last)
    found: dict[str, dict] = {}
    token = None
    url = fs.json_url("b/{}/o", bucket)
    for _ in range(max_pages):
        params = {"prefix": prefix, "startOffset": keys[0], "maxResults": "1000",
                  "fields": "items(name,size,generation,crc32c),nextPageToken"}
        if end is not None:
            params["endOffset"] = end
        if token:
            params["pageToken"] = token
        page = (await http.request(fs, "GET", url, op="list", what=f"{bucket}/{prefix}", params=params)).json()
        items = page.get("items", [])
        for it in items:
            if it["name"] in wanted:
                found[it["name"]] = {"name": f"{bucket}/{it['name']}", "size": int(it["size"]),
                                     "generation": it.get("generation"), "crc32c": it.get("crc32c"),
                                     "type": "file"}
        token = page.get("nextPageToken")
        if not token or (items and items[-1]["name"] >= last):
            break
    return found


async def infos_for_paths(fs: "FluxFileSystem", paths: list[str]) -> list[dict]:
    """Info dicts for "bucket/key" paths: from the listing cache, else from range listings.

    Paths the cache does not know are listed in key ranges of ~1,000 (one request per
    1,000 objects, concurrently) when there are enough of them for compose to pay; a range
    that turns out sparse gives up after a few pages, and what is still unknown gets a
    name-only info (read directly).
    """
    found, missing = _cached_infos(fs, paths)
    if len(missing) >= MAX_SOURCES:
        by_bucket: dict[str, list[str]] = collections.defaultdict(list)
        for p in missing:
            b, _, k = p.partition("/")
            by_bucket[b].append(k)
        tasks = []
        for b, keys in by_bucket.items():
            keys.sort()
            chunks = [keys[i:i + 1000] for i in range(0, len(keys), 1000)]
            for n, chunk in enumerate(chunks):
                end = chunks[n + 1][0] if n + 1 < len(chunks) else None
                tasks.append((b, _list_range(fs, b, chunk, end, max_pages=3)))
        sem = asyncio.Semaphore(16)

        async def limited(coro):
            async with sem:
                return await coro

        lists = await asyncio.gather(*(limited(c) for _, c in tasks))
        for (b, _), got in zip(tasks, lists):
            for k, info in got.items():
                found[f"{b}/{k}"] = info
    return [found.get(p) or {"name": p} for p in paths]


async def cat_paths(fs: "FluxFileSystem", paths: list[str], on_error: str = "raise",
                    skip_dirs: bool = False) -> dict[str, Result]:
    """`cat` of many "bucket/key" paths: metadata from the cache or range listings, then `cat_objects`.

    `skip_dirs` (for recursive cats) drops paths the listing cache knows as directories.
    """
    infos = await infos_for_paths(fs, paths)
    if skip_dirs:
        infos = [i for i in infos if i.get("type") != "directory"]
    return await cat_objects(fs, infos, on_error=on_error)


async def cat_file(fs: "FluxFileSystem", path: str, start: Optional[int] = None, end: Optional[int] = None,
                   **kwargs: Any) -> bytes:
    """One object (or a range of it): parallel ranged GETs when large, a plain GET when small."""
    bucket, key, gen = fs.split_path(path)
    size = None
    if start is not None and start < 0 or end is not None and end < 0:
        size = (await fs._info(path))["size"]
        start = max(0, size + start) if start is not None and start < 0 else start
        end = max(0, size + end) if end is not None and end < 0 else end
    if start is not None and end is not None and end <= start:
        return b""
    got = await read_object(fs, bucket, key, start=start, end=end, generation=kwargs.get("generation") or gen or None,
                            chunk=kwargs.get("chunk") or DEFAULT_CHUNK)
    return got.body

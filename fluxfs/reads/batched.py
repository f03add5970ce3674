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
* whatever fails falls back to a direct read of the current object, or of the listed generation for
  `cat_objects` (`pin`: `ObjectChanged` once it is gone) (fresh metadata from the
  response headers, verified against its own crc32c).

Temporary objects are registered with `temporaries` before they can exist and deleted in the
background (deletes never hold up reads); a batch waits for its deletes before returning,
and cancellation deletes what was created before re-raising.
"""
from __future__ import annotations

import asyncio
import collections
import time
import warnings
from typing import TYPE_CHECKING, Iterable, Optional, Union


from ..gcs import checksums
from .. import temporaries
from ..errors import HttpError, PreconditionFailed, RetryableError, object_changed
from ..gcs import http, tempnames
from ..gcs.chunks import Chunked
from ..zonal import transport
from .direct import get_chunks, read_object
from .plan import ObjectRef, plan, to_objs

if TYPE_CHECKING:  # pragma: no cover
    from ..gcs.client import Client

from ..gcs.redact import get_logger

logger = get_logger(__name__)  # records redacted: no credentials in logs

# Deletes run beside the reads on their own budget; with 64 readers this stays under
# aiohttp's 100-connection default, so a backlog of deletes never takes a reader's socket.
DELETE_CONCURRENCY = 32

Result = Union[bytes, BaseException]


def check_on_error(on_error: str) -> None:
    """`on_error` as fsspec's `cat` takes it: "raise", "omit" or "return"."""
    if on_error not in ("raise", "omit", "return"):
        raise ValueError(f"on_error must be 'raise', 'omit' or 'return', not {on_error!r}")


def compose_on(client: "Client") -> bool:
    """Whether batched reads compose: the `compose` option, unless the server refused it (403)."""
    return client.options.compose and client.options.max_composite_size > 0 and not client.refused.compose_denied


def _deny_compose(client: "Client", exc: BaseException) -> None:
    """Compose (or deleting its temporaries) is forbidden: turn it off for this filesystem, warn once."""
    if not client.refused.compose_denied:
        client.refused.compose_denied = True
        warnings.warn(f"fluxfs: compose is not permitted ({exc}); reading objects directly from now on",
                      RuntimeWarning, stacklevel=2)


class _Batch:
    """One `cat_objects` call: a queue of jobs worked by `concurrency` workers."""

    def __init__(self, client: "Client", concurrency: int):
        self.client = client
        self.results: dict[str, Result] = {}
        self.jobs: collections.deque = collections.deque()
        self.concurrency = concurrency
        self.reg = temporaries.registry(client)
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

    async def read_direct(self, o: ObjectRef) -> None:
        """Plain GET (parallel ranges when large) of the current object (or the generation the caller
        named), checked against its crc32c."""
        try:
            got = await read_object(self.client, o.bucket, o.key, size_hint=o.size,
                                    generation=o.generation if o.pinned else None)
        except asyncio.CancelledError:
            raise
        except FileNotFoundError as exc:
            self._forget(o)
            # its message names bucket/key; a listed generation gone since is the one error every reader gives
            self.results[o.path] = object_changed(o.path, o.generation) if o.listed else exc
            return
        except Exception as exc:  # per-object outcome, follows on_error
            self.results[o.path] = exc
            return
        if o.generation is not None and got.generation is not None and got.generation != o.generation:
            self._forget(o)  # the listing cache is stale for this object
        self.stats["direct"] += 1
        self.results[o.path] = got.body

    def _forget(self, o: ObjectRef) -> None:
        try:
            self.client.invalidate_cache(o.path)
        except Exception:  # cache hygiene only
            pass

    def fallback(self, objs: Iterable[ObjectRef]) -> None:
        """Read these directly, with fresh metadata, by the next free worker."""
        for o in objs:
            self.stats["fallback"] += 1
            self.jobs.append(("one", o))
        self.wake.set()

    async def read_group(self, group: list[ObjectRef]) -> None:
        """Compose the group into a temporary object, GET it and slice it; what fails is read directly."""
        client = self.client
        bucket = group[0].bucket
        if not compose_on(client):  # compose was turned off meanwhile (403)
            self.fallback(group)
            return
        key = tempnames.temp_key(client.job_id, "compose", client.options.temp_prefix)
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
            if int(meta.get("size", 0)) != expected:  # absent: 0 (servers that omit zeros)
                # The server ignored a generation pin and an object changed size.
                self.stats["size_mismatch"] += 1
            elif expected:
                # Kept as aiohttp's chunks: the slices are cut from them, not from a joined copy.
                body = (await get_chunks(client, bucket, key, 0, expected, generation=gen)).chunks
            else:
                body = []  # only empty objects: nothing to download
        except asyncio.CancelledError:
            raise
        except PermissionError as exc:
            _deny_compose(client, exc)
        except Exception as exc:  # 412/404 (changed/vanished), faults after retries, ...
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

    def _slice(self, group: list[ObjectRef], chunks: list[bytes]) -> None:
        """The group's results cut from the composite; a slice whose crc32c differs from the listing's is re-read."""
        bad = []
        results = self.results
        value = checksums.crc32c
        for o, piece in zip(group, _pieces(chunks, [o.size for o in group])):
            if o.crc is not None and value(piece) != o.crc:
                bad.append(o)
            else:
                results[o.path] = piece
        if bad:
            # Changed behind an unpinned compose, or corrupted: the current bytes come from a direct read.
            self.stats["crc_mismatch"] += len(bad)
            self.fallback(bad)

    async def _compose(self, bucket: str, key: str, group: list[ObjectRef]) -> dict:
        """Compose the group, every source pinned to its listed generation; returns generation and size."""
        body = {
            "sourceObjects": [
                {"name": o.key, "generation": int(o.generation),
                 "objectPreconditions": {"ifGenerationMatch": int(o.generation)}}
                for o in group
            ],
            # The marker lets `cleanup` tell this composite from a user's object under the prefix.
            "destination": {"contentType": "application/octet-stream",
                            "metadata": tempnames.marker(self.client.job_id)},
        }
        # Retried safely: the destination name is unique to this group, the sources are pinned and the
        # composite is created only if absent, so a retry after a lost answer cannot make a second one.
        what = f"{bucket}/{key}"
        url = self.client.json_url("b/{}/o/{}/compose", bucket, key)
        params = {"fields": "generation,size", "ifGenerationMatch": "0"}  # a partial response: less to parse

        async def attempt(n: int) -> dict:
            try:
                return (await http.request_once(self.client, "POST", url, what=what, json=body, params=params)).json()
            except PreconditionFailed:
                if n == 0:  # a source changed since it was listed
                    raise
                try:  # the composite exists: an earlier attempt made it (the name is ours alone)
                    return (await http.request(self.client, "GET", self.client.json_url("b/{}/o/{}", bucket, key),
                                               op="metadata", what=what, params={"fields": "generation,size"})).json()
                except FileNotFoundError:
                    raise PreconditionFailed(412, f"{what}: a source changed since it was listed") from None

        return await self.client.retry_policy("compose").run(attempt, what=f"compose {what}")

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
                ok = await temporaries.delete(self.client, tpath, gen, raise_denied=True)
            except PermissionError as exc:
                _deny_compose(self.client, exc)
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


async def cat_objects(client: "Client", infos: Iterable[dict], on_error: str = "raise",
                      pin: bool = False) -> dict[str, Result]:
    """Read many objects given their listing info; returns {"bucket/key": bytes | exception}.

    `on_error`: "raise" the first failure (FileNotFoundError naming a vanished object),
    "omit" failed paths, or "return" their exceptions in the dict, like fsspec's `cat`.
    `pin`: read each info dict's generation (`ObjectChanged` once it is gone), not the live object.
    """
    check_on_error(on_error)
    objs = to_objs(infos, client.split_path if client.version_aware else None, pin)
    opts = client.options
    if compose_on(client):
        cap = opts.max_composite_size
        groups, direct = plan(objs, cap, min(opts.compose_threshold, cap))
        groups, direct = await transport.without_compose(client, groups, direct)  # none on zonal buckets
    else:
        groups, direct = [], objs
    batch = _Batch(client, opts.read_concurrency)
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

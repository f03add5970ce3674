"""Byte ranges of one object read straight into buffers the caller owns (`read_into`).

Each ranged GET's body is copied chunk by chunk, as aiohttp receives it, into the destination
buffers it covers: one copy in all, no joined `bytes`. Requests are pinned to one generation and
run concurrently under a bound (which several objects' reads may share); when they cover the
object to its end the crc32c of the whole is checked from the pieces' crcs, without a second pass.
"""
from __future__ import annotations

import asyncio
import dataclasses
from typing import TYPE_CHECKING, Any, Optional, Sequence

import aiohttp

from ..errors import ChecksumMismatch, ObjectChanged, PreconditionFailed, object_changed
from ..gcs import checksums, http, lean_get
from ..gcs.tasks import gather_all
from ..gcs.urls import named
from ..gcs.checksums import crc32c_combine
from ..zonal import grpc_reads, transport
from .direct import DEFAULT_CHUNK, DEFAULT_RANGE_CONCURRENCY, _content_range, _object_headers, check_ranged_answer
from .direct import _range_header, media_get, media_request

if TYPE_CHECKING:  # pragma: no cover
    from ..gcs.client import Client

# Segments closer than this are fetched by one GET and the bytes between them dropped: a GET's
# first byte costs ~30 ms on the cloud profile, what 3 MB take to arrive on one connection.
DEFAULT_MAX_GAP = 1 << 20


@dataclasses.dataclass
class Request:
    """One ranged GET [start, end) and where its bytes go: (offset in the range, writable view)."""

    start: int
    end: int
    pieces: list = dataclasses.field(default_factory=list)
    crc32c: Optional[int] = None


@dataclasses.dataclass
class IntoResult:
    """What a `read_into` learned and did."""

    size: int                  # the whole object's size
    generation: Optional[str]
    crc32c: Optional[int]      # the whole object's crc32c, if the server sent it
    verified: bool             # the whole object was read and its crc32c matched
    requests: int
    bytes_received: int


def plan(segments: Sequence[tuple[int, Any]], range_size: int, max_gap: int, what: str) -> list[Request]:
    """Requests of at most `range_size` bytes covering `segments` ((object offset, writable buffer)),
    merging segments less than `max_gap` apart; ValueError if segments overlap."""
    views = sorted(((off, memoryview(buf).cast("B")) for off, buf in segments), key=lambda s: s[0])
    reqs: list[Request] = []
    last_end = -1
    for off, mv in views:
        if off < 0:
            raise ValueError(f"read_into {what}: negative offset {off}")
        if not len(mv):
            continue
        if mv.readonly:
            raise ValueError(f"read_into {what}: the buffer for offset {off} is read-only")
        if off < last_end:
            raise ValueError(f"read_into {what}: segments overlap at offset {off} (the previous ends at {last_end})")
        last_end = off + len(mv)
        pos = 0
        while pos < len(mv):
            at = off + pos
            cur = reqs[-1] if reqs else None
            if cur is None or at - cur.end > max_gap or at - cur.start >= range_size:
                cur = Request(at, at)
                reqs.append(cur)
            take = min(len(mv) - pos, cur.start + range_size - at)
            cur.pieces.append((at - cur.start, mv[pos:pos + take]))
            cur.end = at + take
            pos += take
    return reqs


def _scatter(data: bytes, pos: int, pieces: list, i: int) -> int:
    """Copy `data` (bytes [pos, pos + len) of a range) into the pieces it covers; returns the next piece index."""
    src = memoryview(data)
    n, p = len(data), 0
    while p < n and i < len(pieces):
        rel, dst = pieces[i]
        at = pos + p
        if at < rel:          # bytes between two segments: dropped
            p += min(n - p, rel - at)
            continue
        off = at - rel
        take = min(n - p, len(dst) - off)
        dst[off:off + take] = src[p:p + take]
        p += take
        if off + take == len(dst):
            i += 1
    return i


async def _fetch_once(client, bucket, key, req: Request, generation,
                      verify: bool) -> tuple[int, Optional[str], Optional[int]]:
    """One GET of `req`'s range into its pieces; returns (object size, generation, object crc32c)."""
    what = f"{bucket}/{key}"
    if transport.for_read(client, bucket).grpc:  # a zonal bucket: a bidi read, then scattered
        got = await grpc_reads.read(client, bucket, key, req.start, req.end, generation)
        running, pos, i = 0, 0, 0
        for data in got.chunks:
            running = checksums.extend(running, data) if verify else None
            i = _scatter(data, pos, req.pieces, i)
            pos += len(data)
        if pos != req.end - req.start:
            raise ValueError(f"bytes {req.start}-{req.end - 1} lie past the end of {what}")
        req.crc32c = running
        return got.size, got.generation, got.crc32c
    session = await client.session()
    got = await _lean_once(session, client, bucket, key, req, generation, verify, what)
    if got is not None:
        return got
    async with http.timeouts_named(client, what), \
            media_get(session, client, bucket, key, generation, req.start, req.end) as r:
        await check_ranged_answer(r, req.start, req.end, what, f"bytes {req.start}-{req.end - 1} lie past the end "
                                  f"of {what}", missing=named(bucket, key, generation))
        gen, crc = _object_headers(r.headers)
        size = _content_range(r.headers.get("Content-Range", ""))[1] if r.status == 206 else -1
        want = req.end - req.start
        running = 0 if verify else None
        pos = i = 0
        async for data, _ in r.content.iter_chunks():
            if pos + len(data) > want:   # a whole-object answer: keep only the range asked for
                data = data[:max(0, want - pos)]
            if not data:
                continue
            if running is not None:
                running = checksums.extend(running, data)
            i = _scatter(data, pos, req.pieces, i)
            pos += len(data)
    if r.status == 200:
        size = int(r.headers.get("Content-Length", pos))
    if pos != want:
        raise aiohttp.ClientPayloadError(f"short body reading {what}: {pos} bytes for range {req.start}-{req.end}")
    req.crc32c = running
    return size, gen, crc


async def _lean_once(session, client, bucket, key, req: Request, generation, verify: bool,
                     what: str) -> Optional[tuple[int, Optional[str], Optional[int]]]:
    """`_fetch_once` received straight into the pieces (gcs/lean_get.py); None when it falls back to aiohttp."""
    url, params = media_request(client, bucket, key, generation)
    if params is not None or not lean_get.usable(session, url):
        return None
    try:
        headers, running = await lean_get.get_into(
            session, url, client.headers(_range_header(req.start, req.end)), req.start, req.end, req.pieces,
            verify, client.options.http_timeout, what)
    except lean_get.Fallback:
        return None
    gen, crc = _object_headers(headers)
    req.crc32c = running
    return _content_range(headers["Content-Range"])[1], gen, crc


async def read_into(client: "Client", bucket: str, key: str, segments: Sequence[tuple[int, Any]], *,
                    generation: Optional[str] = None, prefix: Optional[tuple[int, int]] = None,
                    range_size: Optional[int] = None, concurrency: Optional[int] = None,
                    limit: Optional[asyncio.Semaphore] = None, max_gap: int = DEFAULT_MAX_GAP,
                    verify: bool = True) -> IntoResult:
    """Fill each writable buffer of `segments` ((object offset, buffer)) with the object's bytes there.

    `prefix` = (length, crc32c) of bytes [0, length) the caller already holds: when the requests
    cover the rest of the object, the whole object's crc32c is checked. `limit` bounds requests in
    flight (shared between objects); else `concurrency` (16) for this call. Without `generation`,
    the first request's answer pins it for the others.
    """
    what = f"{bucket}/{key}"
    reqs = plan(segments, range_size or DEFAULT_CHUNK, max_gap, what)
    sem = limit or asyncio.Semaphore(concurrency or DEFAULT_RANGE_CONCURRENCY)
    policy = client.retry_policy("read")
    seen: dict[str, Any] = {"gen": generation, "size": None, "crc": None}

    async def one(req: Request) -> None:
        async with sem:
            size, gen, crc = await policy.run(
                lambda _a: _fetch_once(client, bucket, key, req, seen["gen"], verify), what=f"read {what}")
        seen["gen"] = seen["gen"] or gen
        seen["size"], seen["crc"] = size, crc if crc is not None else seen["crc"]

    try:
        if reqs and generation is None:
            await one(reqs[0])
            rest = reqs[1:]
        else:
            rest = reqs
        await gather_all(one(r) for r in rest)
    except ObjectChanged:
        raise
    except (FileNotFoundError, PreconditionFailed) as exc:
        if seen["gen"] is None:  # the first, unpinned read: the object is not there at all
            raise
        raise object_changed(what, seen["gen"]) from exc
    received = sum(r.end - r.start for r in reqs)
    verified = False
    if verify and seen["crc"] is not None and reqs and seen["size"] == reqs[-1].end:
        verified = _check_whole(reqs, prefix, seen["crc"], what, seen["gen"])
    return IntoResult(seen["size"] if seen["size"] is not None else -1, seen["gen"], seen["crc"], verified,
                      len(reqs), received)


def _check_whole(reqs: list[Request], prefix: Optional[tuple[int, int]], expected: int, what: str,
                 gen: Optional[str]) -> bool:
    """Check the object's crc32c when the requests (after `prefix`) cover it contiguously; False if they do not."""
    at, value = prefix if prefix is not None else (0, 0)
    for r in reqs:
        if r.start != at or r.crc32c is None:
            return False
        value = crc32c_combine(value, r.crc32c, r.end - r.start)
        at = r.end
    if value != expected:
        raise ChecksumMismatch(f"crc32c mismatch reading {what} (generation {gen}) into buffers: "
                               "bytes corrupted in transit")
    return True

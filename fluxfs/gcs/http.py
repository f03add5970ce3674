"""One HTTP call to GCS through the filesystem's aiohttp session, with auth, retries and error mapping.

Every acceleration goes through `request`, so retries, Retry-After and the mapping of
404/403/412 to Python exceptions behave the same for listing, reads and writes.
"""
from __future__ import annotations

import asyncio
import dataclasses
from typing import Any, Iterable, Mapping

import aiohttp
import orjson

from ..errors import RequestTimeout, ServerUnreachable, raise_for_status
from . import progress, redact
from .client import Client, client_of
from .retry import RetryPolicy


@dataclasses.dataclass
class Response:
    status: int
    headers: Mapping[str, str]
    body: bytes

    def json(self) -> Any:
        # orjson parses a 1,000-item list page in about half the time of the json module;
        # on a busy client that is ~15% of a listing's CPU.
        return orjson.loads(self.body)


async def request_once(
    client: Client,
    method: str,
    url: str,
    *,
    what: str,
    params: Mapping[str, Any] | None = None,
    headers: Mapping[str, str] | None = None,
    data: Any = None,
    json: Any = None,
    ok: Iterable[int] = (200,),
    sends: list | None = None,
) -> Response:
    """One attempt: send, read the whole body, raise the mapped exception unless the status is in `ok`.

    `sends`, a list, gets one entry each time the request goes out: aiohttp re-sends an idempotent
    request once, silently, when its kept-alive connection drops before the answer (see `count_sends`).
    """
    client = client_of(client)
    session = await client.session()
    if data is None and json is None:
        # Nothing to send: aiohttp's sock_read (restarted by every byte received) bounds the wait.
        async with timeouts_named(client, what, method), redact.scrubbing():
            return await _send(session, client, method, url, what=what, params=params, headers=headers,
                               data=None, ok=ok, sends=sends, timeout=client.options.http_timeout)
    # A body: the watchdog bounds every stretch without progress, sending included (gcs/progress.py).
    if json is not None:
        data = progress.SlicedBytes(orjson.dumps(json), content_type="application/json")
    elif isinstance(data, (bytes, bytearray, memoryview)):
        data = progress.SlicedBytes(bytes(data) if isinstance(data, memoryview) else data)
    watch = progress.Watchdog(client.options.read_timeout, what, method)
    async with timeouts_named(client, what, method), redact.scrubbing():
        return await watch.run(_send(session, client, method, url, what=what, params=params, headers=headers,
                                     data=data, ok=ok, sends=sends, timeout=client.options.body_timeout))


class timeouts_named:  # lower case: used as a function, `async with timeouts_named(...)`
    """Turn aiohttp's bare timeouts into a retryable RequestTimeout that names the object; name it
    in ServerUnreachable too. (A class, not an async generator: it wraps every GET, and a generator
    context manager costs several times more per request.)"""

    __slots__ = ("client", "what", "method")

    def __init__(self, client: Client, what: str, method: str = "GET"):
        self.client, self.what, self.method = client, what, method

    async def __aenter__(self) -> None:
        return None

    async def __aexit__(self, kind: Any, exc: Any, tb: Any) -> bool:
        if kind is None:
            return False
        if isinstance(exc, ServerUnreachable):
            raise ServerUnreachable(f"{self.what}: {exc}") from None
        if isinstance(exc, asyncio.TimeoutError):
            limit = self.client.options.http_timeout.sock_read
            raise RequestTimeout(f"{self.what}: timed out: no answer from the server within {limit:g} s "
                                 f"({self.method} {type(exc).__name__})") from exc
        return False


async def _send(session, client, method, url, *, what, params, headers, data, ok, sends, timeout) -> Response:
    async with session.request(
        method,
        url,
        params=client.params(params),
        headers=client.headers(headers),
        data=data,
        timeout=timeout,
        trace_request_ctx=sends,
    ) as r:
        watch = progress.current()
        if watch is None:
            body = await r.read()
        else:  # answer bytes are progress too
            watch.on_answer()
            chunks = []
            async for chunk in r.content.iter_any():
                chunks.append(chunk)
                watch.on_received(len(chunk))
            body = b"".join(chunks)
        if r.status not in ok:
            raise_for_status(r.status, body, what, r.headers)
            # A 2xx/3xx we did not ask for: treat as a protocol error.
            raise_for_status(500, body or f"unexpected HTTP {r.status}".encode(), what)
        return Response(r.status, r.headers, body)


async def request(
    client: Client,
    method: str,
    url: str,
    *,
    op: str,
    what: str = "",
    retry: RetryPolicy | None = None,
    **kwargs: Any,
) -> Response:
    """`request_once` under the retry policy for `op` ("list", "read", "compose", "write", "delete").

    Only call this for requests that are safe to repeat: idempotent ones, or ones made
    safe by a generation precondition.
    """
    client = client_of(client)  # a filesystem is taken too (tests, benchmarks): its client
    policy = retry or client.retry_policy(op)
    what = what or url
    return await policy.run(lambda _attempt: request_once(client, method, url, what=what, **kwargs),
                            what=f"{op} {what}")


def goog_hash(headers: Any, name: str) -> str | None:
    """One hash ("crc32c" or "md5") from x-goog-hash headers ("crc32c=...,md5=...", possibly repeated)."""
    values = headers.getall("x-goog-hash", []) if hasattr(headers, "getall") else [headers.get("x-goog-hash", "")]
    for value in values:
        for part in (value or "").split(","):
            key, _, val = part.strip().partition("=")
            if key == name and val:
                return val
    return None


async def _count_send(session: Any, ctx: Any, params: Any) -> None:
    if isinstance(ctx.trace_request_ctx, list):
        ctx.trace_request_ctx.append(None)


# Counts the times a request's headers go out, for requests that pass a list as `sends`.
_SEND_COUNTER = aiohttp.TraceConfig()
_SEND_COUNTER.on_request_headers_sent.append(_count_send)
_SEND_COUNTER.freeze()


def count_sends(session: aiohttp.ClientSession) -> aiohttp.ClientSession:
    """Let `request_once(..., sends=[])` see how often its request went out on this session."""
    if _SEND_COUNTER not in session.trace_configs:
        session.trace_configs.append(_SEND_COUNTER)
    return session

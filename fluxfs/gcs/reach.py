"""Failing fast, and clearly, when the server cannot be reached at all.

A refused connection or an unresolvable name means the request never left this machine, so it is
safe to repeat whatever it does; a server restarting is back within a second or two. After
`connect_timeout` seconds of such failures (`CONNECT_RETRY_S` by default; the gRPC channel of zonal buckets
waits as long, `zonal/grpc_client.py`) every request (fluxfs's and gcsfs's own, through the session
middleware) fails with one `ServerUnreachable` line naming the endpoint and how to point fluxfs
elsewhere, instead of tens of seconds of retries ending in a long aiohttp traceback.
"""
from __future__ import annotations

import asyncio
import logging
import threading
import time

import aiohttp

from ..errors import ServerUnreachable

CONNECT_RETRY_S = 1.5
HINT = ("set STORAGE_EMULATOR_HOST=HOST:PORT or endpoint_url= to where your server listens, "
        "or start one with `fluxfs serve`")


def describe(request: aiohttp.ClientRequest, exc: aiohttp.ClientConnectorError) -> str:
    """One line: which endpoint, what went wrong, what to do."""
    url = request.url
    origin = f"{url.scheme}://{url.host}" + (f":{url.port}" if not url.is_default_port() else "")
    cause = getattr(exc.os_error, "strerror", None) or str(exc.os_error or exc)
    if isinstance(exc, aiohttp.ClientConnectorDNSError):
        cause = f"cannot resolve {url.host} ({cause}; no network?)"
    else:
        cause = cause.lower()
    return f"cannot reach the storage server at {origin}: {cause}; {HINT}"


class FailFast:
    """aiohttp client middleware: retry connection failures for `within` seconds, then ServerUnreachable."""

    def __init__(self, within: float = CONNECT_RETRY_S):
        self.within = within

    async def __call__(self, request: aiohttp.ClientRequest, handler) -> aiohttp.ClientResponse:
        first = None
        delay = 0.05
        while True:
            try:
                return await handler(request)
            except aiohttp.ClientConnectorError as exc:
                if isinstance(exc, (aiohttp.ClientConnectorSSLError, aiohttp.ClientConnectorCertificateError)):
                    raise  # not a server that is down: retrying cannot help, and aiohttp's message says it
                now = time.monotonic()
                first = first if first is not None else now
                if now - first + delay > self.within:
                    raise ServerUnreachable(describe(request, exc)) from None
                await asyncio.sleep(delay)
                delay = min(delay * 2, 0.5)


class _QuietUnreachable(logging.Filter):
    """gcsfs logs every error it does not retry with its traceback (`logger.exception`); ServerUnreachable
    reaches the caller as one line anyway, so that log record would only repeat it, 20 lines long."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.exc_info and isinstance(record.exc_info[1], ServerUnreachable))


_QUIET = _QuietUnreachable()
logging.getLogger("gcsfs").addFilter(_QUIET)


def with_fail_fast(session_kwargs: dict | None, within: float = CONNECT_RETRY_S) -> dict:
    """gcsfs's `session_kwargs` with the middleware added, retrying for `within` seconds (kept first, whatever
    the caller gave; one given already is replaced)."""
    kwargs = dict(session_kwargs or {})
    given = tuple(m for m in kwargs.get("middlewares") or () if not isinstance(m, FailFast))
    kwargs["middlewares"] = (FailFast(within), *given)
    return kwargs


def check_resolvable(url: str, timeout: float = 2.0) -> None:
    """ServerUnreachable at once when the endpoint's host name does not resolve (no network).

    Without an endpoint or a token, gcsfs looks for credentials first, and with no network the
    metadata-server retries alone take half a minute before any request fails. A lookup that is
    merely slow (longer than `timeout`) is let through. It runs on a daemon thread of its own, not in a pool:
    a lookup that never answers then neither holds a shared worker nor delays the interpreter's exit
    (concurrent.futures joins its workers, the event loop's default executor's too, at exit).
    """
    import socket
    from urllib.parse import urlsplit

    host = urlsplit(url).hostname
    if not host:
        return
    failed: list[BaseException] = []
    done = threading.Event()

    def look_up() -> None:
        try:
            socket.getaddrinfo(host, 443)
        except Exception as exc:
            failed.append(exc)
        finally:
            done.set()

    threading.Thread(target=look_up, name="fluxfs-resolve", daemon=True).start()
    if not done.wait(timeout) or not failed:
        return
    exc = failed[0]
    if isinstance(exc, socket.gaierror):
        raise ServerUnreachable(f"cannot reach the storage server at {url}: cannot resolve {host} "
                                f"({exc.strerror}; no network?); {HINT}") from None
    if not isinstance(exc, OSError):
        raise exc

"""aiohttp's internals, read in this module only: what the lean GET path (`lean_get.py`) must know of a session
that aiohttp does not say publicly (its default proxy and auth, HTTP version, middlewares, the connector's SSL
setting). Each is read with a default, so an aiohttp without the attribute makes the lean path step aside
(aiohttp is then used, as everywhere else), never fail. Checked against the version in `CHECKED_AGAINST`."""
from __future__ import annotations

import ssl
from typing import Any, Optional

import aiohttp
import aiohttp.connector

CHECKED_AGAINST = {"aiohttp": "3.14.5"}

_UNKNOWN = object()


def plain_session(session: aiohttp.ClientSession, allowed_middleware: type) -> bool:
    """No default proxy or auth, HTTP/1.1, and no middleware but `allowed_middleware` (ClientSession keeps
    these as `_default_proxy`, `_default_auth`, `_version`, `_middlewares`)."""
    if any(getattr(session, name, _UNKNOWN) is not None for name in ("_default_proxy", "_default_auth")):
        return False
    if getattr(session, "_version", None) != aiohttp.HttpVersion11:
        return False
    return all(isinstance(m, allowed_middleware) for m in getattr(session, "_middlewares", [None]) or ())


def verifying_ssl_context(session: aiohttp.ClientSession) -> Optional[ssl.SSLContext]:
    """The SSL context aiohttp's connector verifies servers with (its own `_ssl`, or aiohttp's default
    `_SSL_CONTEXT_VERIFIED`); None when it does not verify or pins a fingerprint."""
    given: Any = getattr(session.connector, "_ssl", None)
    if isinstance(given, ssl.SSLContext):
        return given
    return getattr(aiohttp.connector, "_SSL_CONTEXT_VERIFIED", None) if given is True else None

"""What keeps a web page in the user's browser from driving the server: the Host check (DNS
rebinding), the Origin check (cross-origin requests), no browser-simple content types where JSON is
expected, and the token on control endpoints when the server requires one.

The server is for loopback use (local development, tests, CI); these checks stop a page the user
happens to open from reading or changing its data, which loopback binding alone does not.
"""
from __future__ import annotations

import ipaddress
from typing import Iterable, Optional
from urllib.parse import urlsplit

from aiohttp import web

from .errors import ServerError

# Content types a browser sends cross-origin without asking first (a CORS "simple" request).
SIMPLE_TYPES = frozenset({"text/plain", "application/x-www-form-urlencoded", "multipart/form-data"})


def split_host(value: str) -> tuple[str, str]:
    """``host[:port]`` (IPv6 in brackets) as (host, port); port "" when absent."""
    value = value.strip().lower()
    if value.startswith("["):
        host, _, rest = value[1:].partition("]")
        return host, rest[1:] if rest.startswith(":") else ""
    if value.count(":") == 1:
        host, _, port = value.partition(":")
        return host, port
    return value, ""


def _ip(name: str) -> Optional[ipaddress._BaseAddress]:
    try:
        return ipaddress.ip_address(name.split("%", 1)[0])
    except ValueError:
        return None


def host_allowed(host: str, local_ip: Optional[str], extra: Iterable[str] = ()) -> bool:
    """Whether a Host (or Origin host) names this server: a loopback name or address, the address
    the connection arrived on, or a name the server was told to accept (``allowed_hosts``).

    A DNS-rebinding page reaches the server under its own domain name, which none of these match.
    """
    if host in ("localhost", "localhost.") or host.endswith(".localhost"):
        return True
    ip = _ip(host)
    if ip is not None:
        if ip.is_loopback:
            return True
        if local_ip is not None:
            mine = _ip(local_ip)
            if mine is not None and (mine == ip or getattr(mine, "ipv4_mapped", None) == ip):
                return True
    return host in extra


def _local_ip(request: web.Request) -> Optional[str]:
    sock = request.transport.get_extra_info("sockname") if request.transport is not None else None
    return sock[0] if isinstance(sock, tuple) and sock else None


def check(request: web.Request, settings: dict, control: bool, expects_json: bool) -> Optional[ServerError]:
    """The reason to refuse ``request`` before routing it, or None to let it through.

    ``control``: a /_fluxfs/ endpoint (always needs JSON bodies; the token when one is required).
    ``expects_json``: a JSON API call whose body, if any, is JSON (uploads and batch are not).
    """
    extra = settings.get("allowed_hosts") or ()
    local_ip = _local_ip(request)
    host_header = request.headers.get("Host")
    if host_header is not None and not host_allowed(split_host(host_header)[0], local_ip, extra):
        return ServerError(403, f"Host {host_header!r} is not this server's address; the server answers "
                                "to loopback names and the address it listens on (DNS rebinding protection). "
                                "Add a name with `fluxfs serve --allow-host NAME`.", "forbidden")
    origin = request.headers.get("Origin")
    if origin is not None:
        parts = urlsplit(origin)
        same = host_header is not None and parts.scheme in ("http", "https") and \
            parts.netloc.lower() == host_header.strip().lower()
        if not same:
            return ServerError(403, f"Cross-origin request from {origin!r} refused: this server only answers "
                                    "requests from its own origin.", "forbidden")
    if request.method in ("POST", "PUT", "PATCH") and (control or expects_json):
        ctype = request.content_type.lower()  # aiohttp's default for a missing header: application/octet-stream
        missing = "Content-Type" not in request.headers
        if ctype in SIMPLE_TYPES or (control and (missing or ctype != "application/json")):
            got = "no Content-Type" if missing else f"Content-Type {ctype!r}"
            return ServerError(415, f"{request.method} {request.path} expects a JSON body "
                                    f"(Content-Type: application/json), got {got}.", "invalid")
    token = settings.get("require_token")
    if control and token is not None and request.path != "/_fluxfs/health" and \
            request.headers.get("Authorization") != "Bearer " + token:
        return ServerError(401, "Control endpoints need the server's bearer token (missing or wrong).", "required")
    return None

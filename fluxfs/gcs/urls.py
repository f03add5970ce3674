"""Endpoint URLs, object URLs and object names: the one place that parses them.

Pure string work (no torch, no I/O but the environment), so the CLI and pipes share one object-URL parser.
"""
from __future__ import annotations

import os
from typing import NamedTuple, Optional
from urllib.parse import SplitResult, urlsplit

DEFAULT_PROTOCOL = "flux"
# URL protocols that name GCS objects, which FluxFileSystem opens alike (flux://b/k is gs://b/k).
OBJECT_PROTOCOLS = ("flux", "gs", "gcs")


def split_endpoint(endpoint: str) -> SplitResult:
    """An endpoint as given to `--endpoint` or STORAGE_EMULATOR_HOST ("host:port" or "http://host:port")."""
    return urlsplit(endpoint if "://" in endpoint else f"http://{endpoint}")


def normalize_endpoint(endpoint: str) -> str:
    """An endpoint in either form ("host:port" or "http://host:port") as a URL: "http://host:port".

    STORAGE_EMULATOR_HOST is commonly set without a scheme; `--endpoint` and ``endpoint_url``
    accept the same forms, so the one value works everywhere.
    """
    endpoint = str(endpoint).strip()
    return endpoint if "://" in endpoint else f"http://{endpoint}"


def is_loopback(endpoint_url: Optional[str]) -> bool:
    """True when the endpoint (or, without one, STORAGE_EMULATOR_HOST) is an address on this machine."""
    url = endpoint_url or os.environ.get("STORAGE_EMULATOR_HOST", "")
    if not url:
        return False
    host = split_endpoint(url).hostname or ""
    return host in ("localhost", "::1") or host.startswith("127.")


class ObjectURL(NamedTuple):
    """An object URL's parts. `key` may be empty (a bucket) or end in '/' (a prefix); `bucket` may be empty."""

    protocol: str
    bucket: str
    key: str

    @property
    def path(self) -> str:
        """``bucket/key``, as fsspec paths and info-dict names are spelled."""
        return f"{self.bucket}/{self.key}"


def url_protocol(url: str) -> Optional[str]:
    """The protocol of ``protocol://...``, or None for a bare path (a "://" inside a key is no protocol)."""
    head, sep, _ = url.partition("://")
    return head if sep and "/" not in head else None


def parse_url(url: str, default_protocol: str = DEFAULT_PROTOCOL) -> ObjectURL:
    """``protocol://bucket/key`` or ``bucket/key`` -> `ObjectURL`, the key kept as written (fsspec would strip a
    trailing '/').

    Nothing is checked: callers that need a bucket or a key say so in their own words.
    """
    protocol = url_protocol(url)
    rest = url if protocol is None else url[len(protocol) + 3:]
    bucket, _, key = rest.partition("/")
    return ObjectURL(default_protocol if protocol is None else protocol, bucket, key)


def named(bucket: str, key: str, generation: Optional[str] = None) -> str:
    """"bucket/key", or "bucket/key#generation" when one generation is read: an error about a deleted
    generation must not read as if the live object were missing."""
    return f"{bucket}/{key}#{generation}" if generation else f"{bucket}/{key}"

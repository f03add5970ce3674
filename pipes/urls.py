"""The one parser of object URLs in pipes: ``protocol://bucket/key`` (or a bare ``bucket/key``) into its parts."""
from __future__ import annotations

from typing import NamedTuple, Optional

DEFAULT_PROTOCOL = "flux"


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
    """``protocol://bucket/key`` or ``bucket/key`` -> `ObjectURL`, the key kept as written (fsspec would strip a trailing '/').

    Nothing is checked: callers that need a bucket or a key say so in their own words.
    """
    protocol = url_protocol(url)
    rest = url if protocol is None else url[len(protocol) + 3:]
    bucket, _, key = rest.partition("/")
    return ObjectURL(default_protocol if protocol is None else protocol, bucket, key)

"""What libraries built on fluxfs (`fluxfs.pipes`) use of its shared base, as one public module.

The sync bridge (`run`: Ctrl-C cancels the coroutine and waits for its cleanup), the fork hook
(`reset_in_child`), temporaries deleted on SIGTERM (`clean_up_on_sigterm`), `gather_all`, `Chunked` bodies, the one
gap-coalescing rule (`coalesce`), redacting loggers, the one object-URL parser, the one crc32c helper (`crc32c`,
`crc_from_b64`) and the whole-object check (`check_whole`), manifests and `cached_cat` (a listing's object through
the node-local cache). Everything else under `fluxfs.gcs`, `fluxfs.reads`, `fluxfs.writes` and `fluxfs.listing` is
internal: `.importlinter` keeps `fluxfs.pipes` to this module, `fluxfs`, `fluxfs.errors` and `fluxfs.options`.
"""
from __future__ import annotations

from typing import Any

from .gcs.bridge import run, submit
from .gcs.checksums import crc32c, crc_from_b64
from .gcs.chunks import Chunked
from .gcs.fork import reset_in_child
from .gcs.redact import get_logger
from .gcs.tasks import gather_all
from .gcs.urls import DEFAULT_PROTOCOL, OBJECT_PROTOCOLS, ObjectURL, parse_url, url_protocol
from .gcs.verify import check_whole
from .reads.ranges import Group, coalesce
from .temp_registry import clean_up_on_sigterm

__all__ = ["DEFAULT_PROTOCOL", "OBJECT_PROTOCOLS", "Chunked", "Group", "ObjectURL", "acached_cat", "cached_cat",
           "check_whole", "clean_up_on_sigterm", "coalesce", "crc32c", "crc_from_b64", "gather_all", "get_logger",
           "manifest_line", "parse_url", "read_manifest", "reset_in_child", "run", "submit", "url_protocol"]


def cached_cat(fs: Any, info: dict, cache: Any = None) -> bytes:
    """The object a listing's `info` names through the filesystem's node-local cache (`cache_dir`; no metadata
    request): `fluxfs.reads.cached.cached_cat`, imported on use."""
    from .reads.cached import cached_cat as cat

    return cat(fs, info, cache=cache)


async def acached_cat(fs: Any, info: dict, cache: Any = None, **kwargs: Any) -> bytes:
    """`cached_cat` for a coroutine on the filesystem's loop (`fluxfs.reads.cached.acached_cat`), imported on use."""
    from .reads.cached import acached_cat as cat

    return await cat(fs, info, cache=cache, **kwargs)


def read_manifest(source: Any, *, fs: Any = None, base: str | None = None) -> list:
    """All entries of a manifest (`fluxfs.listing.manifest.read_manifest`), imported on use."""
    from .listing.manifest import read_manifest as read

    return read(source, fs=fs, base=base)


def manifest_line(info: dict) -> str:
    """One JSON-lines manifest line of an object info (`fluxfs.listing.manifest.manifest_line`), imported on use."""
    from .listing.manifest import manifest_line as line

    return line(info)

"""flux:// URLs in the `webdataset` package: a `gopen` handler that reads and writes shards through fluxfs.

Without it webdataset needs ``pipe:fluxfs cat flux://...`` (a process per shard, ~0.5 s to start) or its
``gs://`` handler (``gsutil cat``). After ``register_webdataset(endpoint_url=...)``,
``webdataset.WebDataset("flux://bucket/shard-{0..3}.tar")`` streams each shard with fluxfs's read handle
(parallel ranged GETs, the generation pinned, crc32c checked) and ``webdataset.ShardWriter("flux://...")``
uploads through its write handle. Opt-in, since it changes a table webdataset owns; a forked DataLoader
worker inherits it, a spawned one registers again from ``worker_init_fn``.
"""
from __future__ import annotations

from typing import Any, Iterable, Optional

from fluxfs import FilesystemHandle

from .options import merge_storage_options
from .urls import OBJECT_PROTOCOLS

SCHEMES = ("flux",)


def register_webdataset(storage_options: Optional[dict] = None, *, schemes: Iterable[str] = SCHEMES,
                        **options: Any) -> None:
    """Make webdataset open `schemes` URLs (``flux://``; add ``"gs"`` to replace its ``gsutil cat``) with a
    `FluxFileSystem` of these storage options (``endpoint_url=``, ``token=``, ...), built once per process."""
    import importlib

    gopen = importlib.import_module("webdataset.gopen")  # the module (the package's `gopen` is its function)
    schemes = tuple(schemes)
    bad = [s for s in schemes if s not in OBJECT_PROTOCOLS]
    if bad:
        raise ValueError(f"register_webdataset: fluxfs opens flux://, gs:// and gcs:// URLs, not {bad[0]}://")
    handler = _Opener(FilesystemHandle("flux", merge_storage_options("register_webdataset", storage_options, options)))
    for scheme in schemes:
        gopen.gopen_schemes[scheme] = handler


class _Opener:
    """webdataset's handler signature, ``(url, mode, bufsize, **kw)``: "rb" and "wb" handles of fluxfs."""

    def __init__(self, handle: FilesystemHandle):
        self.handle = handle

    def __call__(self, url: str, mode: str = "rb", bufsize: int = 8192, **kw: Any) -> Any:
        if mode not in ("rb", "wb"):
            raise ValueError(f"webdataset opens {url} with mode {mode!r}; fluxfs's handler takes 'rb' and 'wb'")
        return self.handle.fs.open(url, mode)

    def __repr__(self) -> str:
        return f"fluxfs gopen handler ({self.handle.chain}, {sorted(self.handle.storage_options)})"

"""fluxfs: feed PyTorch from Google Cloud Storage at full speed, and checkpoint back to it.

`FluxFileSystem` is an fsspec filesystem for ``flux://bucket/key`` URLs (gcsfs plus parallel
listing, compose-backed batched reads and parallel multipart writes); `accelerated(fs)` says
whether a filesystem is one, and `FilesystemHandle` rebuilds a filesystem in each process that uses it.
This package never imports torch; the PyTorch layer lives in `fluxfs.pipes`.
"""
from __future__ import annotations

import importlib
from typing import Any

__all__ = ["FilesystemHandle", "FluxFileSystem", "RetryPolicy", "accelerated", "errors", "register_gs", "__version__"]
__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    # Lazy: `python -m fluxfs.server` and `fluxfs serve` need neither gcsfs nor aiohttp's client,
    # and importing gcsfs costs seconds of start-up.
    if name == "FluxFileSystem":
        from .core import FluxFileSystem

        return FluxFileSystem
    if name == "register_gs":
        from .gs_protocol import register_gs

        return register_gs
    if name in ("FilesystemHandle", "accelerated"):
        from . import handle

        return getattr(handle, name)
    if name == "errors":  # by its full name: `from . import errors` would ask this function for it again
        return importlib.import_module(f"{__name__}.errors")
    if name == "RetryPolicy":
        from .gcs.retry import RetryPolicy

        return RetryPolicy
    raise AttributeError(f"module 'fluxfs' has no attribute {name!r}")

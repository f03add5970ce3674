"""fluxfs: feed PyTorch from Google Cloud Storage at full speed, and checkpoint back to it.

`FluxFileSystem` is an fsspec filesystem for ``flux://bucket/key`` URLs (gcsfs plus parallel
listing, compose-backed batched reads and parallel multipart writes). This package never
imports torch; the PyTorch layer lives in `fluxfs.pipes`.
"""
from .core import FluxFileSystem
from .retry import RetryPolicy

__all__ = ["FluxFileSystem", "RetryPolicy", "__version__"]
__version__ = "0.1.0"

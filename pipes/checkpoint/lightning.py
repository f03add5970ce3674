"""Lightning `CheckpointIO` for ``flux://`` paths: `FluxCheckpointIO` (wrap it in AsyncCheckpointIO for background
saves).

Needs the optional extra ``fluxfs[lightning]``; `fluxfs.pipes` itself never imports this module,
so the rest of the package works without Lightning installed.

    from lightning.pytorch.plugins.io import AsyncCheckpointIO
    trainer = Trainer(plugins=[AsyncCheckpointIO(FluxCheckpointIO(endpoint_url=...))],
                      default_root_dir="flux://bucket/run1")

Lightning's ModelCheckpoint lists and creates its directory through fsspec with no storage
options: configure the ``flux`` protocol for it with FSSPEC_FLUX_* environment variables
(e.g. FSSPEC_FLUX_ENDPOINT_URL) or ``fsspec.config.conf["flux"]``.
"""
from __future__ import annotations

import os
from typing import Any

try:
    from lightning.fabric.plugins.io.checkpoint_io import CheckpointIO
    from lightning.fabric.plugins.io.torch_io import TorchCheckpointIO
except ImportError:  # pragma: no cover - depends on the environment
    try:  # the standalone pytorch_lightning
        from lightning_fabric.plugins.io.checkpoint_io import CheckpointIO
        from lightning_fabric.plugins.io.torch_io import TorchCheckpointIO
    except ImportError as exc:
        raise ImportError(
            "fluxfs.pipes.lightning needs Lightning: pip install 'fluxfs[lightning]'"
        ) from exc

from ..urls import url_protocol
from .torch_save import FluxCheckpoint

__all__ = ["FluxCheckpointIO"]


def _url(path: Any) -> str:
    """A ``flux://`` URL from what Lightning passes (str, or a Path that collapsed ``//`` to ``/``)."""
    text = os.fspath(path) if isinstance(path, os.PathLike) else str(path)
    if text.startswith("flux:/") and not text.startswith("flux://"):
        text = "flux://" + text[len("flux:/") :]
    return text


def _local(path: Any) -> bool:
    """A local path (no protocol, or file://): Lightning makes a local checkpoint directory absolute, so a path
    without a protocol from it is never a bare ``bucket/key``."""
    return url_protocol(_url(path)) in (None, "file", "local")


class FluxCheckpointIO(CheckpointIO):
    """Saves with torch.save through fluxfs's atomic parallel writer; loads with weights_only=True by default.

    Local paths (a Trainer whose root or checkpoint directory is local) go to Lightning's own TorchCheckpointIO,
    also loaded with weights_only=True by default: the plugin can stay in place whatever the run writes to."""

    def __init__(self, *, storage_options: dict[str, Any] | None = None, **options: Any):
        """Storage options as keyword arguments or ``storage_options={...}`` (or both, merged), as everywhere
        in fluxfs.pipes."""
        self.checkpoint = FluxCheckpoint(storage_options=storage_options, **options)
        self.local = TorchCheckpointIO()

    def save_checkpoint(self, checkpoint: dict[str, Any], path: Any, storage_options: Any | None = None) -> None:
        if _local(path):
            return self.local.save_checkpoint(checkpoint, path, storage_options)
        if storage_options is not None:
            raise TypeError(
                "FluxCheckpointIO takes its storage options in its constructor, "
                "not per call (Trainer.save_checkpoint(..., storage_options=...))"
            )
        self.checkpoint.save(checkpoint, _url(path))

    def load_checkpoint(
        self, path: Any, map_location: Any | None = None, weights_only: bool | None = None
    ) -> dict[str, Any]:
        # Lightning passes None unless the user chose; None means torch's safe default, True.
        if _local(path):
            return self.local.load_checkpoint(path, map_location=map_location, weights_only=weights_only is not False)
        return self.checkpoint.load(_url(path), map_location=map_location, weights_only=weights_only is not False)

    def remove_checkpoint(self, path: Any) -> None:
        if _local(path):
            return self.local.remove_checkpoint(path)
        fs = self.checkpoint.fs
        target = self.checkpoint.object_path(_url(path))
        try:
            fs.rm(target, recursive=fs.isdir(target))
        except FileNotFoundError:
            pass

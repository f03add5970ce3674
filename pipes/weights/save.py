"""`save_file`: tensors written to a ``flux://`` URL as a safetensors object, streamed and atomic.

The header goes first, then each tensor's bytes in file order, written from the tensor's own memory
into the multipart writer: memory is bounded by the parts in flight, not by the model's size. The
layout and header are the safetensors package's, so both write the same bytes for the same tensors.
On any error or interrupt the upload is aborted and no object (not even a partial one) appears.
"""
from __future__ import annotations

from typing import Any, Mapping, Optional

import torch

from fluxfs import FluxFileSystem

from .header import NAMES, SafetensorsError, build_header, file_order
from .objects import byte_view, filesystem


def check_tensors(tensors: Any, where: str) -> None:
    """SafetensorsError naming the first entry that cannot be saved."""
    if not isinstance(tensors, Mapping):
        raise SafetensorsError(f"{where}: expected a dict of name -> tensor, not {type(tensors).__name__}")
    for name, t in tensors.items():
        if not isinstance(name, str):
            raise SafetensorsError(f"{where}: tensor names must be strings, not {name!r}")
        if name == "__metadata__":
            raise SafetensorsError(f"{where}: '__metadata__' is reserved for metadata, not a tensor name")
        if not isinstance(t, torch.Tensor):
            raise SafetensorsError(f"{where}: {name!r} is a {type(t).__name__}, not a tensor")
        if t.dtype not in NAMES:
            raise SafetensorsError(f"{where}: tensor {name!r} has dtype {t.dtype}, which safetensors cannot store")
        if t.layout != torch.strided:
            raise SafetensorsError(f"{where}: tensor {name!r} is {t.layout}, only dense tensors can be saved")


def save_file(tensors: Mapping[str, torch.Tensor], url: str, metadata: Optional[Mapping[str, str]] = None, *,
              fs: Optional[FluxFileSystem] = None, storage_options: Optional[Mapping[str, Any]] = None,
              **options: Any) -> None:
    """Write `tensors` (and string `metadata`) to `url` in the safetensors format, atomically."""
    where = f"save_file({url})"
    check_tensors(tensors, where)
    fs, path = filesystem(url, fs, storage_options, options, "save_file")
    order = file_order(tensors)
    header = build_header(tensors, order, metadata, where)
    with fs.open(path, "wb") as f:
        f.write(header)
        for name in order:
            t = tensors[name]
            if t.numel() == 0:
                continue
            # One tensor at a time leaves the device or is made contiguous: bounded extra memory.
            t = t.detach().to("cpu").contiguous()
            f.write(byte_view(t))

"""`load_file` and `safe_open`: safetensors objects read from ``flux://`` URLs straight into tensors.

The same calls as the safetensors package's (`safetensors.torch.load_file`, `safetensors.safe_open`),
for objects: nothing is downloaded to disk, each tensor's bytes land in its own memory once, and a
slice (`safe_open(...).get_slice(name)[rows]`) reads only the bytes it selects.
"""
from __future__ import annotations

from typing import Any, Mapping, Optional

import torch

from fluxfs import FluxFileSystem, support

from ..distributed import NO_GROUP
from ..distributed.group import resolve_group
from .cached import open_unfilled
from .grouped import load_grouped, request
from .header import NAMES
from .objects import (Opened, byte_view, check_framework, filesystem, fill, load_tensors, no_such_tensor,
                      open_object, select)
from .slices import normalize, runs
from .staged import load_staged

DEFAULT_CONCURRENCY = 16  # ranged GETs in flight (as load_model_dir's)

# A slice selecting more runs than this reads the span that holds them once and picks them out in
# memory: thousands of tiny segments cost more to plan than the bytes between them.
MAX_RUNS = 4096


def load_file(url: str, device: Any = "cpu", *, fs: Optional[FluxFileSystem] = None, group: Any = NO_GROUP,
              storage_options: Optional[Mapping[str, Any]] = None, **options: Any) -> dict[str, torch.Tensor]:
    """Every tensor of the safetensors object at `url`, as `safetensors.torch.load_file` returns them.

    `group`: a torch.distributed ProcessGroup (None: the default group) whose every rank makes this call:
    each reads ~1/N of the bytes, the group's broadcasts share them (see `load_model_dir`)."""
    fs, path = filesystem(url, fs, storage_options, options, "load_file")
    device = torch.device(device)
    grouped = resolve_group(group, f"load_file({url})")
    if grouped is not None:
        return load_grouped(fs, grouped, lambda: [(support.run(fs, open_unfilled, fs, path, str(url)), None)],
                            DEFAULT_CONCURRENCY, None, device, asking=request(fs, f"flux://{path}"))

    async def load() -> dict[str, torch.Tensor]:
        opened = await open_object(fs, path, str(url))
        if device.type == "cpu":
            return await load_tensors(fs, opened)
        return await load_staged(fs, opened, select(opened, None), device)

    return support.run(fs, load)


class safe_open:  # named as safetensors.safe_open, which it stands in for
    """A safetensors object opened for tensor-by-tensor reads: `keys()`, `metadata()`, `get_tensor(name)`,
    `get_slice(name)[index]`. Only the header is read on opening; every read is pinned to its generation."""

    def __init__(self, url: str, framework: str = "pt", device: Any = "cpu", *,
                 fs: Optional[FluxFileSystem] = None, storage_options: Optional[Mapping[str, Any]] = None,
                 **options: Any):
        check_framework(framework, str(url))
        self.fs, path = filesystem(url, fs, storage_options, options, "safe_open")
        self.device = torch.device(device)
        self._opened: Opened = support.run(self.fs, open_object, self.fs, path, str(url))

    def __enter__(self) -> "safe_open":
        return self

    def __exit__(self, *exc: Any) -> None:
        return None

    def keys(self) -> list[str]:
        """Tensor names, sorted (as safetensors' safe_open lists them)."""
        return sorted(self._opened.header.tensors)

    def offset_keys(self) -> list[str]:
        """Tensor names in the order their bytes lie in the file."""
        return list(self._opened.header.tensors)

    def metadata(self) -> Optional[dict[str, str]]:
        """The header's ``__metadata__`` (None when it has none)."""
        meta = self._opened.header.metadata
        return dict(meta) if meta is not None else None

    def get_tensor(self, name: str) -> torch.Tensor:
        """One tensor, reading only its bytes."""
        if name not in self._opened.header.tensors:
            raise no_such_tensor(self._opened, name)
        got = support.run(self.fs, load_tensors, self.fs, self._opened, [name])[name]
        return got.to(self.device) if self.device.type != "cpu" else got

    def get_slice(self, name: str) -> "TensorSlice":
        """A lazy view of one tensor: index it to read only the bytes the index selects."""
        if name not in self._opened.header.tensors:
            raise no_such_tensor(self._opened, name)
        return TensorSlice(self, name)


class TensorSlice:
    """One tensor of a `safe_open` object, read by index: `get_shape()`, `get_dtype()`, `[index]`."""

    def __init__(self, parent: safe_open, name: str):
        self._parent = parent
        self._info = parent._opened.header.tensors[name]
        self._where = f"{parent._opened.where}: tensor {name!r}"

    def get_shape(self) -> list[int]:
        return list(self._info.shape)

    def get_dtype(self) -> str:
        """The dtype as safetensors spells it ("F32", "BF16", ...)."""
        return NAMES[self._info.dtype]

    def __len__(self) -> int:
        if not self._info.shape:
            raise TypeError(f"{self._where}: len() of a 0-d tensor")
        return self._info.shape[0]

    def __getitem__(self, index: Any) -> torch.Tensor:
        info, parent = self._info, self._parent
        norm = normalize(index, info.shape, self._where)
        out_shape, spans = runs(info.shape, info.dtype.itemsize, norm)
        out = torch.empty(out_shape, dtype=info.dtype)
        if spans and len(spans) <= MAX_RUNS:
            dst, at, wants = byte_view(out), 0, []
            for off, n in spans:
                wants.append((info.start + off, dst[at:at + n]))
                at += n
            support.run(parent.fs, fill, parent.fs, parent._opened, wants)
        elif spans:
            out = self._through_span(norm, spans, out_shape)
        return out.to(parent.device) if parent.device.type != "cpu" else out

    def _through_span(self, norm: list, spans: list, out_shape: tuple) -> torch.Tensor:
        """Many small runs: read the bytes from the first to the last once, pick the selection in memory."""
        info, parent = self._info, self._parent
        lo, hi = spans[0][0], spans[-1][0] + spans[-1][1]
        whole = torch.empty(info.shape, dtype=info.dtype)
        support.run(parent.fs, fill, parent.fs, parent._opened, [(info.start + lo, byte_view(whole)[lo:hi])])
        picked = whole[tuple(slice(r.start, r.stop, r.step) if isinstance(r, range) else r for r in norm)]
        return picked.contiguous().reshape(out_shape)

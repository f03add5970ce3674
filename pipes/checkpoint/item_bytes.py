"""A DCP item's bytes as received, and loading a tensor item from them straight into its target.

`ItemReader` lets torch.load read an item from the chunks its ranged GETs received (no BytesIO copy,
no join). `copy_into_target` skips torch.load's temporary tensor for large items: torch.load would
allocate a fresh storage for every item (page-faulted in, then unmapped: at 2 ranks on 2 cores that
churn cost more than the bytes themselves) before `copy_` copies it again into the state dict.
"""
from __future__ import annotations

import io
import sys
from typing import Any

import numpy
import torch
from torch.distributed.checkpoint.planner import ReadItem

from fluxfs.support import Chunked

from ..torch_adapter import archive_reader, checkpoint_offset, narrow_tensor_by_index

# Items at least this big are copied straight into their target. Below it the second parse of the
# item's zip header (~0.1 ms) costs more than the copy it saves.
DIRECT_MIN_BYTES = 1 << 20


class ItemReader(io.RawIOBase):
    """A seekable read-only file over bytes [start, start + length) of a range received as `body`."""

    def __init__(self, body: Chunked, start: int = 0, length: int | None = None):
        self._body = body
        self._base = start
        self._len = max(0, (len(body) - start) if length is None else min(length, len(body) - start))
        self._pos = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self._len}[whence]
        self._pos = max(0, base + offset)
        return self._pos

    def views(self, pos: int, n: int) -> list[memoryview]:
        """The `n` bytes from position `pos` as views of the received chunks, in order."""
        return self._body.views(self._base + pos, self._base + pos + n)

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        n = max(0, min(len(view), self._len - self._pos))
        done = 0
        for piece in self.views(self._pos, n):
            view[done : done + len(piece)] = piece
            done += len(piece)
        self._pos += n
        return n

    def read(self, size: int = -1) -> bytes:
        end = self._len if size is None or size < 0 else min(self._len, self._pos + size)
        out = bytearray(max(0, end - self._pos))
        self.readinto(out)
        return bytes(out)

    def __len__(self) -> int:
        return self._len


def check_size(where: str, item: ReadItem, loaded: torch.Tensor, target: torch.Tensor) -> None:
    """A saved item whose shape is not its slot's in the state dict is an error, not a partial copy."""
    if loaded.size() != target.size():
        raise ValueError(f"{where}: item {item.storage_index} has size {tuple(loaded.size())}, "
                         f"the state dict expects {tuple(target.size())}")


def copy_into_target(reader: ItemReader, item: ReadItem, target: torch.Tensor, where: str) -> bool:
    """Copy the tensor item torch.save wrote into `reader` straight into `target`.

    False, with nothing copied, where this does not apply (small item, another dtype, a non-contiguous
    slice, a byte order other than ours, a tensor subclass, sparse or quantized): the caller then loads
    it as torch does.
    """
    if (len(reader) < DIRECT_MIN_BYTES or target.device.type != "cpu" or target.layout != torch.strided
            or target.is_quantized or not target.is_contiguous()):
        return False
    # torch.load with map_location="meta" reads only the pickle and records where each storage's
    # bytes start in the archive; it would crash byte-swapping a foreign-endian checkpoint, so the
    # byte order is checked first (checkpoints without the record fall back too).
    archive = archive_reader(reader)
    if not archive.has_record("byteorder") or bytes(archive.get_record("byteorder")).decode() != sys.byteorder:
        return False
    reader.seek(0)
    meta = torch.load(reader, map_location="meta", weights_only=True)
    if (type(meta) is not torch.Tensor or meta.dtype != target.dtype or meta.layout != torch.strided
            or meta.is_quantized):
        return False
    meta = narrow_tensor_by_index(meta, item.storage_offsets, item.lengths)
    check_size(where, item, meta, target)
    offset = checkpoint_offset(meta.untyped_storage())
    if offset is None or not meta.is_contiguous():
        return False
    start = offset + meta.storage_offset() * meta.element_size()
    nbytes = meta.numel() * meta.element_size()
    if start + nbytes > len(reader):
        raise ValueError(f"{where}: item {item.storage_index} needs bytes {start}-{start + nbytes} "
                         f"of its {len(reader)}")
    # numpy copies the received (read-only) chunks with the GIL released, and without torch.frombuffer's
    # warning about a buffer that is not writable (no warning filter to set and put back around it).
    dst = target.detach().reshape(-1).view(torch.uint8).numpy()
    done = 0
    for piece in reader.views(start, nbytes):
        dst[done : done + len(piece)] = numpy.frombuffer(piece, dtype=numpy.uint8)
        done += len(piece)
    return True

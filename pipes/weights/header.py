"""The safetensors header: parsed and checked before any tensor byte is read, and written for saves.

Layout: 8 bytes, the little-endian length N of a JSON header, then the header, then the tensors'
bytes. The header maps each tensor name to {"dtype", "shape", "data_offsets": [begin, end]} (offsets
into the bytes after the header) and may hold "__metadata__", a dict of strings. A valid file's
tensors are contiguous and cover those bytes exactly; anything else is refused, naming the file.
"""
from __future__ import annotations

import dataclasses
import json
import math
import struct
import sys
from typing import Mapping, Optional

import torch

from fluxfs import jsontext

from ..errors import PipesError

# The header may not be larger than this (the safetensors package refuses larger ones too).
MAX_HEADER = 100_000_000

# dtype names as safetensors writes them, for every dtype this torch has; in the order safetensors
# lays tensors out in a file (larger, more aligned types first; by name within one dtype).
_DTYPE_ORDER = ["U64", "I64", "F64", "C64", "F32", "U32", "I32", "BF16", "F16", "U16", "I16",
                "F8_E5M2FNUZ", "F8_E4M3FNUZ", "F8_E4M3", "F8_E5M2", "I8", "U8", "BOOL"]
_TORCH_NAMES = {"U64": "uint64", "I64": "int64", "F64": "float64", "C64": "complex64", "F32": "float32",
                "U32": "uint32", "I32": "int32", "BF16": "bfloat16", "F16": "float16", "U16": "uint16",
                "I16": "int16", "F8_E5M2FNUZ": "float8_e5m2fnuz", "F8_E4M3FNUZ": "float8_e4m3fnuz",
                "F8_E4M3": "float8_e4m3fn", "F8_E5M2": "float8_e5m2", "I8": "int8", "U8": "uint8", "BOOL": "bool"}
DTYPES: dict[str, torch.dtype] = {n: getattr(torch, t) for n, t in _TORCH_NAMES.items() if hasattr(torch, t)}
NAMES: dict[torch.dtype, str] = {d: n for n, d in DTYPES.items()}
RANK = {n: i for i, n in enumerate(_DTYPE_ORDER)}


class SafetensorsError(PipesError, ValueError):
    """A safetensors file (or a tensor dict to save) that is not valid; the message names the file."""


@dataclasses.dataclass(frozen=True)
class TensorInfo:
    """One tensor's entry: dtype, shape and where its bytes lie in the object (absolute offsets)."""

    name: str
    dtype: torch.dtype
    shape: tuple
    start: int
    end: int

    @property
    def nbytes(self) -> int:
        return self.end - self.start


@dataclasses.dataclass(frozen=True)
class Header:
    """A parsed, checked header: tensors in file order, metadata, and where the data starts."""

    tensors: dict          # name -> TensorInfo, in file order
    metadata: Optional[dict]
    data_start: int        # 8 + header length
    size: int              # the object's size


def header_length(first8: bytes, size: int, where: str) -> int:
    """N from the first 8 bytes, checked against the cap and the object's size."""
    if size < 8:
        raise SafetensorsError(f"{where} is not a safetensors file: {size} bytes, fewer than the 8-byte header length")
    (n,) = struct.unpack("<Q", bytes(first8[:8]))
    if n > MAX_HEADER:
        raise SafetensorsError(f"{where} is not a safetensors file: its header claims {n} bytes, "
                               f"more than the {MAX_HEADER}-byte limit")
    if 8 + n > size:
        raise SafetensorsError(f"{where} is truncated or not a safetensors file: its header claims {n} bytes, "
                               f"the object has only {size - 8} after the length")
    return n


def parse_header(raw: bytes, size: int, where: str) -> Header:
    """Parse and check the JSON header `raw` of an object of `size` bytes named `where`."""
    try:
        doc = jsontext.loads(bytes(raw).decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise SafetensorsError(f"{where}: corrupt safetensors header, not valid JSON ({exc})") from None
    if not isinstance(doc, dict):
        raise SafetensorsError(f"{where}: corrupt safetensors header, a JSON {type(doc).__name__} instead of an object")
    metadata = doc.pop("__metadata__", None)
    if metadata is not None and not (isinstance(metadata, dict)
                                     and all(isinstance(v, str) for v in metadata.values())):
        raise SafetensorsError(f"{where}: __metadata__ must map strings to strings, not {metadata!r:.100}")
    data_start = 8 + len(raw)
    infos = [_entry(name, e, data_start, where) for name, e in doc.items()]
    infos.sort(key=lambda t: (t.start, t.end))
    at = data_start
    for t in infos:
        if t.start < at:
            raise SafetensorsError(f"{where}: tensor {t.name!r} overlaps the one before it (its bytes start at "
                                   f"{t.start - data_start}, the previous end at {at - data_start})")
        if t.start > at:
            raise SafetensorsError(f"{where}: {t.start - at} bytes before tensor {t.name!r} belong to no tensor")
        at = t.end
    if at != size:
        if at > size:
            raise SafetensorsError(f"{where} is truncated: its header places tensor bytes up to {at - data_start}, "
                                   f"the object holds {size - data_start} after the header")
        raise SafetensorsError(f"{where}: {size - at} bytes after the last tensor belong to no tensor")
    return Header({t.name: t for t in infos}, metadata, data_start, size)


def _entry(name: str, e: object, base: int, where: str) -> TensorInfo:
    if not isinstance(e, dict) or not {"dtype", "shape", "data_offsets"} <= set(e):
        raise SafetensorsError(f"{where}: tensor {name!r} needs dtype, shape and data_offsets, got {e!r:.200}")
    dtype = DTYPES.get(e["dtype"]) if isinstance(e["dtype"], str) else None
    if dtype is None:
        raise SafetensorsError(f"{where}: tensor {name!r} has dtype {e['dtype']!r}, which torch cannot hold "
                               f"(known: {', '.join(DTYPES)})")
    shape, offs = e["shape"], e["data_offsets"]
    if not (isinstance(shape, list) and all(type(d) is int and d >= 0 for d in shape)):
        raise SafetensorsError(f"{where}: tensor {name!r} has shape {shape!r}, not a list of sizes")
    if not (isinstance(offs, list) and len(offs) == 2 and all(type(o) is int for o in offs)
            and 0 <= offs[0] <= offs[1]):
        raise SafetensorsError(f"{where}: tensor {name!r} has data_offsets {offs!r}, "
                               "not [begin, end] with begin <= end")
    want = math.prod(shape) * dtype.itemsize
    if offs[1] - offs[0] != want:
        raise SafetensorsError(f"{where}: tensor {name!r} ({e['dtype']} {shape}) needs {want} bytes, "
                               f"its data_offsets {offs} give {offs[1] - offs[0]}")
    return TensorInfo(name, dtype, tuple(shape), base + offs[0], base + offs[1])


def file_order(tensors: Mapping[str, torch.Tensor]) -> list[str]:
    """Names in the order safetensors lays tensors out (so both write the same bytes)."""
    return sorted(tensors, key=lambda n: (RANK[NAMES[tensors[n].dtype]], n))


def build_header(tensors: Mapping[str, torch.Tensor], order: list[str], metadata: Optional[Mapping[str, str]],
                 where: str) -> bytes:
    """8-byte length + JSON header for `tensors` laid out in `order`, padded with spaces to a multiple of 8."""
    if sys.byteorder != "little":
        raise SafetensorsError(f"{where}: saving from a big-endian machine is not supported")
    doc: dict = {}
    if metadata is not None:
        if not isinstance(metadata, Mapping) or not all(isinstance(k, str) and isinstance(v, str)
                                                        for k, v in metadata.items()):
            raise SafetensorsError(f"{where}: metadata must map strings to strings, not {metadata!r:.100}")
        doc["__metadata__"] = dict(metadata)
    at = 0
    for name in order:
        t = tensors[name]
        n = t.numel() * t.element_size()
        doc[name] = {"dtype": NAMES[t.dtype], "shape": list(t.shape), "data_offsets": [at, at + n]}
        at += n
    raw = json.dumps(doc, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    raw += b" " * (-(8 + len(raw)) % 8)
    return struct.pack("<Q", len(raw)) + raw

"""One safetensors object on the filesystem: its header read and checked, then byte ranges read into tensors.

The first GET asks for the first 256 KiB (a header is rarely larger) and learns size, generation and
crc32c from its headers; every later read is pinned to that generation. Tensors are allocated from
the header and the received bytes copied once into their memory (`fs.read_ranges(..., into=)`), whose
pages another thread maps ahead of them (`prefault`); when a load covers the whole object, its crc32c
is checked from the pieces' crcs.
"""
from __future__ import annotations

import asyncio
import dataclasses
import threading
from typing import Any, Callable, Iterable, Mapping, Optional

import torch

from fluxfs import FluxFileSystem
from fluxfs.handle import FilesystemHandle, accelerated
from fluxfs.support import Chunked, check_whole

from ..options import merge_storage_options
from ..urls import OBJECT_PROTOCOLS, parse_url, url_protocol
from . import prefault
from .header import Header, SafetensorsError, TensorInfo, header_length, parse_header
from .slices import normalize, runs

PROBE = 256 * 1024


def filesystem(url: str, fs: Optional[FluxFileSystem], storage_options: Optional[Mapping[str, Any]],
               options: Mapping[str, Any], where: str) -> tuple[FluxFileSystem, str]:
    """(the filesystem, "bucket/key") for a ``flux://bucket/key`` URL (``gs://``, ``gcs://``, or a bare ``bucket/key``).

    `fs` must be a `FluxFileSystem` itself (tensors are read into their memory with its ranged reads);
    without it one is built from the storage options through a `FilesystemHandle`, as pipes' datasets do.
    """
    url = str(url)
    if url_protocol(url) not in (None, *OBJECT_PROTOCOLS):  # gs:// and gcs:// name the same objects
        raise ValueError(f"{where} reads flux://, gs:// or gcs:// bucket/key URLs, not {url!r}")
    parsed = parse_url(url)
    if not parsed.bucket or not parsed.key:
        raise ValueError(f"{where}: the URL needs a bucket and an object name: {url!r}")
    if fs is None:
        fs = FilesystemHandle("flux", merge_storage_options(where, storage_options, options)).fs
    elif storage_options or options:
        raise TypeError(f"{where}: give either fs= or storage options, not both")
    elif accelerated(fs) is None:
        raise TypeError(f"{where}: fs= must be a fluxfs FluxFileSystem (tensors are read into place with its "
                        f"ranged reads), not {type(fs).__name__}")
    return fs, parsed.path.rstrip("/")


@dataclasses.dataclass
class Opened:
    """An object whose header has been read: where, which generation, and the bytes already received."""

    path: str
    where: str
    header: Header
    generation: Optional[str]
    head: Chunked          # bytes [0, len(head)) of the object
    head_crc: int
    crc32c: Optional[int] = None  # the whole object's, as storage gave it (a fill of the node's cache checks it)


async def open_object(fs: FluxFileSystem, path: str, where: str, **kwargs: Any) -> Opened:
    """Read and check the header of the safetensors object at `path` (`where` names it in errors; `kwargs`
    go to the first read: generation=, cache=)."""
    got = await fs._read_ranges(path, [(0, PROBE)], max_gap=0, **kwargs)
    head = Chunked([got[0]] if got[0] else [])
    n = header_length(bytes(head)[:8] if len(head) < 8 else head.slice(0, 8), got.size, where)
    if 8 + n > len(head):
        more = await fs._read_ranges(path, [(len(head), 8 + n)], max_gap=0, **{**kwargs, "generation": got.generation})
        head = Chunked(head.chunks + [more[0]])
    crc = check_whole(head.chunks, got.crc32c if len(head) == got.size else None, where, got.generation)
    header = parse_header(bytes(head.slice(8, 8 + n)), got.size, where)
    return Opened(path, where, header, got.generation, head, crc, got.crc32c)


def empty_like(info: TensorInfo) -> torch.Tensor:
    """An uninitialised CPU tensor of the entry's dtype and shape."""
    return torch.empty(info.shape, dtype=info.dtype)


def byte_view(t: torch.Tensor) -> memoryview:
    """A writable byte view of a contiguous CPU tensor's memory (empty for an empty tensor)."""
    if t.numel() == 0:
        return memoryview(bytearray())
    return memoryview(t.reshape(-1).view(torch.uint8).numpy()).cast("B")


async def fill(fs: FluxFileSystem, opened: Opened, wants: Iterable[tuple[int, Any]],
               limit: Optional[asyncio.Semaphore] = None, **kwargs: Any):
    """Fill each buffer of `wants` ((object offset, writable buffer)) with the object's bytes there:
    what the header GET already brought is copied from it, the rest read by ranged GETs."""
    hl = len(opened.head)
    rest = []
    for off, buf in wants:
        mv = memoryview(buf).cast("B")
        if off < hl and len(mv):
            k = min(len(mv), hl - off)
            done = 0
            for piece in opened.head.views(off, off + k):
                mv[done:done + len(piece)] = piece
                done += len(piece)
            mv, off = mv[k:], off + k
        if len(mv):
            rest.append((off, mv))
    if not rest:
        return None
    # The destination's pages mapped ahead of the bytes, off the event loop; from the loop's next turn, after
    # the other objects' tensors of a load are allocated (mapping holds the lock allocations take).
    stop = threading.Event()
    asyncio.get_running_loop().call_soon(prefault.ahead, [mv for _, mv in rest], stop)
    try:
        return await fs._read_ranges(opened.path, [(off, off + len(mv)) for off, mv in rest],
                                     into=[mv for _, mv in rest], generation=opened.generation,
                                     prefix=(hl, opened.head_crc), limit=limit, **kwargs)
    finally:
        stop.set()


def select(opened: Opened, names: Optional[Iterable[str]]) -> list[TensorInfo]:
    """The entries of `names` (all when None) in file order; KeyError naming any the object lacks."""
    infos = opened.header.tensors
    if names is None:
        return list(infos.values())
    wanted = set(names)
    missing = sorted(wanted - set(infos))
    if missing:
        raise KeyError(f"{opened.where} has no tensor(s) {', '.join(map(repr, missing[:5]))}")
    return [t for t in infos.values() if t.name in wanted]


async def load_tensors(fs: FluxFileSystem, opened: Opened, names: Optional[Iterable[str]] = None,
                       limit: Optional[asyncio.Semaphore] = None,
                       slices: Optional[Callable[[str, tuple], Any]] = None) -> dict[str, torch.Tensor]:
    """The object's tensors (or only `names`), in file order, each read straight into its memory;
    `slices(name, shape)` may give an index per tensor (None: all of it), and only its bytes are read."""
    chosen = select(opened, names)
    out: dict[str, torch.Tensor] = {}
    wants: list = []
    for t in chosen:
        index = slices(t.name, t.shape) if slices is not None else None
        if index is None:
            out[t.name] = empty_like(t)
            wants.append((t.start, byte_view(out[t.name])))
            continue
        shape, spans = runs(t.shape, t.dtype.itemsize, normalize(index, t.shape, f"{opened.where}: tensor {t.name!r}"))
        out[t.name] = torch.empty(shape, dtype=t.dtype)
        dst, at = byte_view(out[t.name]), 0
        for off, n in spans:
            wants.append((t.start + off, dst[at:at + n]))
            at += n
    await fill(fs, opened, wants, limit)
    return out


def to_device(tensors: dict[str, torch.Tensor], device: Any) -> dict[str, torch.Tensor]:
    """Tensors moved to `device` (unchanged on the CPU); one at a time, so host memory stays bounded."""
    device = torch.device(device)
    if device.type == "cpu":
        return tensors
    return {name: t.to(device) for name, t in tensors.items()}


def check_framework(framework: str, where: str) -> None:
    if framework not in ("pt", "torch", "pytorch"):
        raise SafetensorsError(f"{where}: framework {framework!r} is not supported here, only 'pt' (torch)")


def no_such_tensor(opened: Opened, name: str) -> KeyError:
    return KeyError(f"{opened.where} has no tensor {name!r}")

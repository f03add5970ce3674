"""torch.distributed.checkpoint storage for ``flux://`` URLs: `FluxStorageWriter`, `FluxStorageReader`.

Built on torch's FsspecWriter/FsspecReader, changed where object storage needs it:
- writes go through the filesystem's atomic parallel multipart writer, without fsync (`sync_files`
  would call os.sync() for every file: a local-disk flush that buys nothing on GCS);
- a stale ``.metadata`` is deleted before any rank writes data, and the new one is written
  (one atomic object, no tmp+rename) only after every data file is committed and checked, so a
  crashed save is never mistaken for a complete one;
- reads fetch only the byte ranges the load plan needs, coalesced, in parallel chunks, with the
  next window prefetched while the current one is deserialized; they are pinned to the data files'
  generations recorded in ``.metadata``, so a concurrent overwrite fails loudly instead of mixing;
- large tensor items are copied from the received bytes straight into their targets, without the
  temporary tensor torch.load would build (`item_bytes.py`).
"""
from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import contextlib
import io
import itertools
import os
import pickle
from typing import Any, Iterator

import fsspec.asyn
import torch
from fsspec.core import url_to_fs
from fsspec.utils import merge_offset_ranges
from torch.distributed._shard._utils import narrow_tensor_by_index
from torch.distributed.checkpoint._fsspec_filesystem import FileSystem as _TorchFsspecFileSystem
from torch.distributed.checkpoint._fsspec_filesystem import FsspecReader, FsspecWriter
from torch.distributed.checkpoint.filesystem import CURRENT_DCP_VERSION, _StorageInfo
from torch.distributed.checkpoint.metadata import Metadata
from torch.distributed.checkpoint.planner import LoadItemType, LoadPlan, LoadPlanner, ReadItem, SavePlan
from torch.distributed.checkpoint.storage import WriteResult
from torch.futures import Future

from fluxfs.gcs.chunks import Chunked

from .checkpoint import upload_errors
from .item_bytes import ItemReader, check_size, copy_into_target

__all__ = ["FluxStorageWriter", "FluxStorageReader", "IncompleteCheckpointError", "CheckpointChangedError"]

METADATA = ".metadata"
MiB = 1 << 20


class IncompleteCheckpointError(FileNotFoundError):
    """The checkpoint has no ``.metadata``: it was never saved, or its save did not finish."""


class CheckpointChangedError(RuntimeError):
    """A data file was replaced after its ``.metadata`` was read (a concurrent save to the same URL)."""


class _ObjectStoreFileSystem(_TorchFsspecFileSystem):
    """torch's fsspec adapter, remembering the storage options (torch's `reset()` drops them)."""

    def __init__(self, storage_options: dict[str, Any]):
        super().__init__()
        self.storage_options = storage_options

    def init_path(self, path: str | os.PathLike, **kwargs: Any) -> str:
        self.fs, _ = url_to_fs(str(path), **{**self.storage_options, **kwargs})
        return str(path).rstrip("/")

    @contextlib.contextmanager
    def create_stream(self, path: str | os.PathLike, mode: str) -> Iterator[io.IOBase]:
        with super().create_stream(path, mode) as stream, upload_errors(stream):
            yield stream

    def mkdir(self, path: str | os.PathLike) -> None:
        # Object stores have no directories; gcsfs's makedirs would even try to create the bucket.
        pass

    def strip(self, path: str | os.PathLike) -> str:
        """`bucket/key` form of a URL, as the filesystem's own methods take it."""
        return self.fs._strip_protocol(str(path))


class FluxStorageWriter(FsspecWriter):
    """DCP storage writer for ``flux://bucket/prefix``; keyword arguments beyond torch's are storage options.

    One file per rank by default (``__{rank}_0.distcp``), uploaded as parallel multipart parts.
    """

    def __init__(
        self,
        url: str | os.PathLike,
        *,
        single_file_per_rank: bool = True,
        thread_count: int = 1,
        per_thread_copy_ahead: int = 10_000_000,
        overwrite: bool = True,
        **storage_options: Any,
    ):
        super().__init__(
            url,
            single_file_per_rank=single_file_per_rank,
            sync_files=False,
            thread_count=thread_count,
            per_thread_copy_ahead=per_thread_copy_ahead,
            overwrite=overwrite,
            **storage_options,
        )
        self.fs = _ObjectStoreFileSystem(storage_options)
        self.path = self.fs.init_path(url)

    def _this_saves_metadata_path(self) -> str:
        """`.metadata`, or `__{rank}.metadata` when ranks save without collectives."""
        if not self.use_collectives and self.rank is not None:
            return str(self._get_metadata_path(self.rank))
        return str(self._get_metadata_path())

    def prepare_global_plan(self, plans: list[SavePlan]) -> list[SavePlan]:
        # Runs on the coordinator after every rank planned and before any rank writes: the one
        # point where removing the old .metadata guarantees no reader pairs it with new data files.
        path = self._this_saves_metadata_path()
        try:
            self.fs.rm_file(path)
        except FileNotFoundError:
            # Also what a missing bucket answers: say so before any rank starts uploading.
            bucket = self.fs.fs.split_path(self.fs.strip(self.path))[0]
            if not self.fs.fs.exists(bucket):
                raise FileNotFoundError(f"DCP save to {self.path}: bucket {bucket!r} does not exist") from None
        return super().prepare_global_plan(plans)

    def finish(self, metadata: Metadata, results: list[list[WriteResult]]) -> None:
        metadata.version = CURRENT_DCP_VERSION
        storage_md = {}
        for write_results in results:
            storage_md.update({wr.index: wr.storage_data for wr in write_results})
        metadata.storage_data = storage_md
        metadata.storage_meta = self.storage_meta()
        # Generations let a reader refuse data files replaced after it read this .metadata.
        metadata.fluxfs_generations = self._verify_data_files(storage_md.values())
        # A single atomic object write (no tmp + rename, which is copy + delete on GCS).
        with self.fs.create_stream(self._this_saves_metadata_path(), "wb") as f:
            pickle.dump(metadata, f)

    def _verify_data_files(self, infos: Any) -> dict[str, str]:
        """Check with one listing that every data file exists and is long enough; returns their generations."""
        needed: dict[str, int] = {}
        for info in infos:
            if isinstance(info, _StorageInfo):
                needed[info.relative_path] = max(needed.get(info.relative_path, 0), info.offset + info.length)
        if not needed:
            return {}
        prefix = self.fs.strip(self.path)
        fs = self.fs.fs
        fs.invalidate_cache(prefix)
        listing = {
            entry["name"].rstrip("/").rsplit("/", 1)[-1]: entry
            for entry in fs.ls(prefix, detail=True)
            if entry.get("type") == "file"
        }
        sizes = {name: entry["size"] for name, entry in listing.items()}
        for name, end in sorted(needed.items()):
            if name not in sizes:
                raise FileNotFoundError(f"DCP save to {self.path}: data file {name} is missing; not writing {METADATA}")
            if sizes[name] < end:
                raise IOError(
                    f"DCP save to {self.path}: data file {name} has {sizes[name]} bytes, metadata needs {end}; "
                    f"not writing {METADATA}"
                )
        return {name: str(listing[name]["generation"]) for name in needed if listing[name].get("generation")}


class FluxStorageReader(FsspecReader):
    """DCP storage reader for ``flux://bucket/prefix``: ranged, coalesced, parallel reads of what the plan needs.

    `max_gap`: ranges closer than this are fetched as one; `chunk_size`: the largest single GET;
    `window`: bytes fetched as one batch, `prefetch`: batches fetched ahead of deserialization (memory is
    about (prefetch + 1) x window); `concurrency`: GETs in flight per batch.

    Defaults measured loading 1 GiB of 64 MiB tensors on the cloud profile (medians of 3): 64 MiB
    windows x 16 GETs 418 MB/s, 64 MiB x 2 windows ahead... 4 windows ahead 450, 128 MiB x 16 420,
    128 MiB x 32 GETs 489 (~32 ranged GETs in flight across the prefetched windows; ~384 MiB held).
    """

    def __init__(
        self,
        url: str | os.PathLike,
        *,
        max_gap: int = 1 * MiB,
        chunk_size: int = 8 * MiB,
        window: int = 128 * MiB,
        prefetch: int = 2,
        concurrency: int = 32,
        **storage_options: Any,
    ):
        super().__init__(url, **storage_options)
        self.fs = _ObjectStoreFileSystem(storage_options)
        self.path = self.fs.init_path(url)
        self.max_gap = max_gap
        self.chunk_size = chunk_size
        self.window = window
        self.concurrency = concurrency
        if prefetch < 1:
            raise ValueError(f"prefetch must be at least 1, not {prefetch}")
        self.prefetch = prefetch
        self._generations: dict[str, str] = {}
        # Tensor items copied straight from the received bytes into their targets / through torch.load.
        self.stats: collections.Counter = collections.Counter()

    def read_metadata(self, *args: Any, **kwargs: Any) -> Metadata:
        path = str(self._get_metadata_path(kwargs.get("rank")))
        try:
            return super().read_metadata(*args, **kwargs)
        except FileNotFoundError as exc:
            raise IncompleteCheckpointError(
                f"no complete checkpoint at {self.path}: {path} does not exist "
                "(nothing was saved there, or the save did not finish)"
            ) from exc

    def set_up_storage_reader(self, metadata: Metadata, is_coordinator: bool, *args: Any, **kwargs: Any) -> None:
        super().set_up_storage_reader(metadata, is_coordinator, *args, **kwargs)
        # {"bucket/key": generation} of each data file, when FluxStorageWriter recorded them.
        self._generations = {
            self.fs.strip(self.fs.concat_path(self.path, name)): gen
            for name, gen in (getattr(metadata, "fluxfs_generations", None) or {}).items()
        }

    # -- reading the plan -------------------------------------------------------------------

    def _ranges(self, plan: LoadPlan) -> list[tuple[str, int, int, list[ReadItem]]]:
        """Coalesced (path, start, end, items) ranges covering every read item, sorted by file and offset."""
        by_file: dict[str, list[ReadItem]] = {}
        for item in plan.items:
            info: _StorageInfo = self.storage_data[item.storage_index]
            by_file.setdefault(info.relative_path, []).append(item)
        ranges: list[tuple[str, int, int, list[ReadItem]]] = []
        for relative_path, items in sorted(by_file.items()):
            path = self.fs.strip(self.fs.concat_path(self.path, relative_path))
            items.sort(key=lambda it: self.storage_data[it.storage_index].offset)
            spans = [self.storage_data[it.storage_index] for it in items]
            _, starts, ends = merge_offset_ranges(
                [path] * len(spans),
                [s.offset for s in spans],
                [s.offset + s.length for s in spans],
                max_gap=self.max_gap,
                sort=False,  # already sorted by offset
            )
            i = 0
            for start, end in zip(starts, ends):
                members = []
                while i < len(items) and spans[i].offset + spans[i].length <= end:
                    members.append(items[i])
                    i += 1
                ranges.append((path, start, end, members))
        return ranges

    def _windows(self, ranges: list[tuple[str, int, int, list[ReadItem]]]) -> Iterator[list]:
        """Consecutive groups of ranges of about `window` bytes (a bigger range is a window alone)."""
        group: list = []
        size = 0
        for r in ranges:
            length = r[2] - r[1]
            if group and size + length > self.window:
                yield group
                group, size = [], 0
            group.append(r)
            size += length
        if group:
            yield group

    def _fetch(self, window: list[tuple[str, int, int, list[ReadItem]]]) -> list[list[bytes]]:
        """The bytes of each range in `window` as its chunks (of at most `chunk_size`, fetched in parallel)."""
        paths, starts, ends, owner = [], [], [], []
        for n, (path, start, end, _) in enumerate(window):
            for lo in range(start, end, self.chunk_size):
                paths.append(path)
                starts.append(lo)
                ends.append(min(lo + self.chunk_size, end))
                owner.append(n)
        fs = self.fs.fs
        generations = self._generations
        if generations and getattr(fs, "async_impl", False):
            chunks = fsspec.asyn.sync(fs.loop, self._cat_pinned, fs, paths, starts, ends, generations)
        else:
            chunks = fs.cat_ranges(paths, starts, ends, batch_size=self.concurrency, on_error="raise")
        pieces: list[list[bytes]] = [[] for _ in window]
        for n, path, chunk, lo, hi in zip(owner, paths, chunks, starts, ends):
            if len(chunk) != hi - lo:
                raise IOError(f"short read of {path} bytes {lo}-{hi}: got {len(chunk)} bytes")
            pieces[n].append(chunk)
        return pieces

    async def _cat_pinned(self, fs: Any, paths: list, starts: list, ends: list, generations: dict) -> list[bytes]:
        """Ranged reads pinned to the generations the metadata recorded: an overwritten file fails loudly."""
        sem = asyncio.Semaphore(self.concurrency)

        async def one(path: str, start: int, end: int) -> bytes:
            gen = generations.get(path)
            async with sem:
                try:
                    return await fs._cat_file(path, start=start, end=end, **({"generation": gen} if gen else {}))
                except FileNotFoundError as exc:
                    raise CheckpointChangedError(
                        f"checkpoint {self.path} changed while loading: {path} generation {gen} is gone "
                        "(overwritten by another save to the same URL?); load it again"
                    ) from exc

        tasks = [asyncio.ensure_future(one(*r)) for r in zip(paths, starts, ends)]
        try:
            return await asyncio.gather(*tasks)
        except BaseException:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            raise

    def read_data(self, plan: LoadPlan, planner: LoadPlanner) -> Future[None]:
        windows = iter(list(self._windows(self._ranges(plan))))
        # `prefetch` windows are fetched ahead while this thread deserializes the oldest one, so
        # the network and the CPU work overlap; memory stays about (prefetch + 1) x window.
        with concurrent.futures.ThreadPoolExecutor(self.prefetch, thread_name_prefix="fluxfs-dcp-read") as pool:
            pending: collections.deque = collections.deque()
            for window in itertools.islice(windows, self.prefetch):
                pending.append((window, pool.submit(self._fetch, window)))
            while pending:
                window, fetched = pending.popleft()
                blobs = fetched.result()
                for nxt in itertools.islice(windows, 1):
                    pending.append((nxt, pool.submit(self._fetch, nxt)))
                for (_, start, _, items), chunks in zip(window, blobs):
                    body = Chunked(chunks)  # one index of the range's chunks for all its items
                    for item in items:
                        info: _StorageInfo = self.storage_data[item.storage_index]
                        reader = ItemReader(body, info.offset - start, info.length)
                        self._load_item(planner, item, info, reader)
                del blobs
        fut: Future[None] = Future()
        fut.set_result(None)
        return fut

    def _load_item(self, planner: LoadPlanner, item: ReadItem, info: _StorageInfo, data: ItemReader) -> None:
        """Deserialize one item's bytes and hand them to the planner (same semantics as torch's reader)."""
        stream = self.transforms.transform_load_stream(item, info.transform_descriptors or (), data)
        if item.type == LoadItemType.BYTE_IO:
            planner.load_bytes(item, io.BytesIO(stream.read(-1)))
            return
        target = planner.resolve_tensor(item).detach()
        if stream is data and copy_into_target(data, item, target, self.path):
            self.stats["copied_direct"] += 1
        else:
            if not stream.seekable():
                stream = io.BytesIO(stream.read(-1))
            stream.seek(0)
            tensor = torch.load(stream, map_location="cpu", weights_only=True)
            tensor = narrow_tensor_by_index(tensor, item.storage_offsets, item.lengths)
            check_size(self.path, item, tensor, target)
            target.copy_(tensor)
            self.stats["deserialized"] += 1
        planner.commit_tensor(item, target)

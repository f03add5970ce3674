"""`FluxStorageWriter`: torch.distributed.checkpoint saves to ``flux://`` URLs, never leaving a torn checkpoint.

Built on torch's FsspecWriter, changed where object storage needs it:
- writes go through the filesystem's atomic parallel multipart writer, without fsync (`sync_files`
  would call os.sync() for every file: a local-disk flush that buys nothing on GCS);
- a stale ``.metadata`` is deleted before any rank writes data, and the new one is written
  (one atomic object, no tmp+rename) only after every data file is committed and checked, so a
  crashed save is never mistaken for a complete one. It records the data files' generations, which
  `FluxStorageReader` pins its reads to.
"""
from __future__ import annotations

import os
import pickle
from typing import Any

from torch.distributed.checkpoint.filesystem import CURRENT_DCP_VERSION
from torch.distributed.checkpoint.metadata import Metadata
from torch.distributed.checkpoint.planner import SavePlan
from torch.distributed.checkpoint.storage import WriteResult

from ..options import merge_storage_options
from ..torch_adapter import FsspecWriter, StorageInfo, metadata_path
from ..urls import parse_url
from .dcp_storage import METADATA, ObjectStoreFileSystem
from .single_process import quiet_single_process_warning

__all__ = ["FluxStorageWriter"]


class FluxStorageWriter(FsspecWriter):
    """DCP storage writer for ``flux://bucket/prefix``; keyword arguments beyond torch's are storage options
    (or ``storage_options={...}``, or both, merged).

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
        storage_options: dict[str, Any] | None = None,
        **options: Any,
    ):
        storage_options = merge_storage_options("FluxStorageWriter", storage_options, options)
        quiet_single_process_warning()  # a single-process save or load on purpose: no warning on every call
        super().__init__(
            url,
            single_file_per_rank=single_file_per_rank,
            sync_files=False,
            thread_count=thread_count,
            per_thread_copy_ahead=per_thread_copy_ahead,
            overwrite=overwrite,
            **storage_options,
        )
        self.fs = ObjectStoreFileSystem(storage_options)
        self.path = self.fs.init_path(url)

    def _this_saves_metadata_path(self) -> str:
        """`.metadata`, or `__{rank}.metadata` when ranks save without collectives."""
        if not self.use_collectives and self.rank is not None:
            return str(metadata_path(self, self.rank))
        return str(metadata_path(self))

    def prepare_global_plan(self, plans: list[SavePlan]) -> list[SavePlan]:
        # Runs on the coordinator after every rank planned and before any rank writes: the one
        # point where removing the old .metadata guarantees no reader pairs it with new data files.
        path = self._this_saves_metadata_path()
        try:
            self.fs.rm_file(path)
        except FileNotFoundError:
            # Also what a missing bucket answers: say so before any rank starts uploading.
            bucket = parse_url(str(self.path)).bucket
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
            if isinstance(info, StorageInfo):
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
        sizes = {name: int(entry.get("size") or 0) for name, entry in listing.items()}
        for name, end in sorted(needed.items()):
            if name not in sizes:
                raise FileNotFoundError(f"DCP save to {self.path}: data file {name} is missing; not writing {METADATA}")
            if sizes[name] < end:
                raise IOError(
                    f"DCP save to {self.path}: data file {name} has {sizes[name]} bytes, metadata needs {end}; "
                    f"not writing {METADATA}"
                )
        return {name: str(listing[name]["generation"]) for name in needed if listing[name].get("generation")}

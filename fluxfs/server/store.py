"""All buckets and their objects: creation, replacement, metadata patches, deletion, paged listing
over the sorted index, bulk synthetic objects, generations; optional disk persistence.

Everything here is synchronous and runs on the server's event loop; the HTTP layers
(json_*, uploads, xml_routes) translate requests into these calls.
"""
from __future__ import annotations

import hashlib
import threading
import time
from typing import Any, Dict, Iterator, List, Optional, Tuple

from sortedcontainers import SortedDict

from ..gcs.checksums import crc32c, crc_to_b64
from ..gcs.chunks import Chunked
from .buckets import Bucket, validate_bucket_name, validate_object_name
from .errors import ServerError
from .folder_store import imply_folders
from .objects import EXTRA_FIELDS, Obj, SynthBatch, b64
from .diskerr import disk_writes
from .persist import Persistence
from .spool import Spooled
from .preconditions import check_preconditions
from .synthetic import SizeSpec
from . import versions


def prefix_successor(p: str) -> str:
    """The smallest string greater than every string starting with p (p non-empty)."""
    return p[:-1] + chr(ord(p[-1]) + 1)


class Store:
    """All buckets. ``root`` set -> every change is also written to disk (atomically) and reloaded on start."""

    def __init__(self, root: Optional[str] = None):
        self.buckets: Dict[str, Bucket] = {}
        self.generations_made = 0  # objects (generations) created: shows whether a retried write applied twice
        self.keys_scanned = 0  # index entries visited by list(): shows a page costs O(page), not O(bucket)
        self._last_gen = 0
        self._lock = threading.Lock()
        self.persist: Optional[Persistence] = None
        if root:
            self.persist = Persistence(root)
            self.buckets, self._last_gen = self.persist.load()

    # -- generations --
    def next_generation(self) -> int:
        """Microsecond timestamps like GCS, forced strictly increasing."""
        with self._lock:
            g = max(time.time_ns() // 1000, self._last_gen + 1)
            self._last_gen = g
            self.generations_made += 1  # objects written: how a test sees a write applied twice
            return g

    # -- buckets --
    def create_bucket(self, name: str, labels: Optional[Dict[str, str]] = None, exist_ok: bool = False,
                      versioning: Optional[bool] = None, layout: Optional[Dict[str, Any]] = None) -> Bucket:
        validate_bucket_name(name)
        if name in self.buckets:
            if exist_ok:
                return self.buckets[name]
            raise ServerError(409, f"Your previous request to create the named bucket succeeded and you already "
                                   f"own it: {name}", "conflict", "BucketAlreadyOwnedByYou")
        b = Bucket(name, labels=labels, versioning=versioning, layout=dict(layout or {}))
        if self.persist:
            try:
                with disk_writes(f"bucket {name}"):
                    self.persist.save_bucket(b)
            except BaseException:
                self.persist.delete_bucket(name)  # its directories, just made
                raise
        self.buckets[name] = b
        return b

    def bucket(self, name: str) -> Bucket:
        b = self.buckets.get(name)
        if b is None:
            raise ServerError(404, f"The specified bucket does not exist: {name}", "notFound", "NoSuchBucket")
        return b

    def update_bucket(self, name: str, changes: Dict[str, Any]) -> Bucket:
        """Apply a buckets.patch/update: ``labels`` and ``versioning`` ({"enabled": bool})."""
        b = self.bucket(name)
        before = (b.labels, b.versioning, b.metageneration)
        if "labels" in changes:
            b.labels = changes["labels"] or None
        if "versioning" in changes:
            b.versioning = bool((changes["versioning"] or {}).get("enabled"))
        b.metageneration += 1
        if self.persist:
            try:
                with disk_writes(f"bucket {name}"):
                    self.persist.save_bucket(b)
            except BaseException:
                b.labels, b.versioning, b.metageneration = before
                raise
        return b

    def delete_bucket(self, name: str) -> None:
        b = self.bucket(name)
        if b.objects or b.noncurrent:
            raise ServerError(409, f"The bucket you tried to delete is not empty: {name}", "conflict",
                              "BucketNotEmpty")
        del self.buckets[name]
        if self.persist:
            self.persist.delete_bucket(name)

    # -- objects --
    def get(self, bucket: str, name: str, generation: Optional[int] = None) -> Obj:
        b = self.bucket(bucket)
        obj = b.lookup(name)
        if generation is not None and (obj is None or obj.generation != generation):
            obj = versions.find(b, name, generation)  # a noncurrent generation (versioned buckets)
        if obj is None:
            raise ServerError(404, f"No such object: {bucket}/{name}", "notFound", "NoSuchKey")
        return obj

    def spool_dir(self, bucket: str) -> Optional[str]:
        """Where an upload into `bucket` is written as it arrives (``--root``), or None (in memory)."""
        self.bucket(bucket)
        return self.persist.data_dir(bucket) if self.persist else None

    def peek(self, bucket: str, name: str) -> Optional[Obj]:
        return self.bucket(bucket).lookup(name)

    def put(self, bucket: str, name: str, data: bytes, *, content_type: Optional[str] = None,
            metadata: Optional[Dict[str, str]] = None, extra: Optional[Dict[str, Any]] = None,
            expect_md5: Optional[str] = None, expect_crc: Optional[str] = None,
            component_count: Optional[int] = None, preconditions: Optional[Dict[str, Optional[int]]] = None,
            crc: Optional[str] = None, with_md5: bool = True) -> Obj:
        """Create or replace an object; checks client hashes and preconditions before anything changes.

        with_md5=False: objects GCS stores without an MD5 (XML multipart uploads), like composites.
        """
        b = self.bucket(bucket)
        validate_object_name(name)
        if data.__class__ is Spooled:  # received straight to a file under the root (spool.py)
            size = data.size
            if crc is None:
                crc = crc_to_b64(data.crc)
            md5 = None if component_count is not None else "" if not with_md5 or data.md5 is None \
                else b64(data.md5.digest())
        else:
            if data.__class__ is not Chunked or self.persist:
                data = bytes(data)
            size = len(data)
            if crc is None:
                crc = crc_to_b64(crc32c(data))
            # "" marks "no MD5, ever": None would make the md5 property hash the body on first use.
            md5 = None if component_count is not None else "" if not with_md5 else b64(hashlib.md5(data).digest())
        if expect_crc is not None and expect_crc != crc:
            raise ServerError(400, f"Provided CRC32C \"{expect_crc}\" doesn't match calculated CRC32C \"{crc}\".",
                              "invalid", "BadDigest")
        if expect_md5 is not None and expect_md5 != md5:
            raise ServerError(400, f"Provided MD5 hash \"{expect_md5}\" doesn't match calculated MD5 hash \"{md5}\".",
                              "invalid", "BadDigest")
        old = b.lookup(name)
        check_preconditions(old, **(preconditions or {}))
        obj = Obj(name, size, self.next_generation(), content_type=content_type or "application/octet-stream",
                  metadata=metadata or None, data=None if data.__class__ is Spooled else data, md5=md5, crc=crc,
                  component_count=component_count, extra=extra or None)
        keep = b.versioning and old is not None  # the replaced generation stays, noncurrent
        if self.persist:
            if keep:  # recorded first: a failed write of the new generation then only drops this record
                versions.retire(b, old)
            try:
                with disk_writes(f"{bucket}/{name}"):
                    if keep:
                        self.persist.save_noncurrent(bucket, old)
                    # The body moves to disk (data -> path, or the spooled file renamed into place).
                    self.persist.save_object(bucket, obj, None if keep else old,
                                             data if data.__class__ is Spooled else None)
            except BaseException:
                if keep:
                    versions.forget(b, old)
                    old.deleted, old._json = None, None
                    self.persist.delete_noncurrent(bucket, old, keep_data=True)
                raise
        elif keep:
            self._retire(bucket, b, old)
        b.objects[name] = obj
        if b.hns:  # GCS makes the folders an object's name implies in an HNS bucket
            imply_folders(self, b, name)
        return obj

    def _retire(self, bucket: str, b: Bucket, old: Obj) -> None:
        versions.retire(b, old)
        if self.persist:
            self.persist.save_noncurrent(bucket, old)

    def delete(self, bucket: str, name: str, generation: Optional[int] = None,
               preconditions: Optional[Dict[str, Optional[int]]] = None) -> None:
        b = self.bucket(bucket)
        obj = self.get(bucket, name, generation)
        check_preconditions(obj, **(preconditions or {}))
        if obj.deleted is not None:  # a noncurrent generation, named by its number: gone for good
            versions.forget(b, obj)
            if self.persist:
                self.persist.delete_noncurrent(bucket, obj)
            return
        # Versioned buckets keep a deleted live object as noncurrent, unless its generation was named.
        keep = bool(b.versioning) and generation is None
        now = time.time()
        if self.persist:
            with disk_writes(f"{bucket}/{name}"):
                if keep:
                    self.persist.save_noncurrent(bucket, obj, deleted=now)
                try:
                    self.persist.delete_object(bucket, obj, keep_data=keep)
                except BaseException:
                    if keep:
                        self.persist.delete_noncurrent(bucket, obj, keep_data=True)
                    raise
        del b.objects[name]
        if keep:
            versions.retire(b, obj)
            obj.deleted = now

    def patch(self, bucket: str, name: str, changes: Dict[str, Any], generation: Optional[int] = None,
              preconditions: Optional[Dict[str, Optional[int]]] = None) -> Obj:
        """Update metadata fields; metadata keys set to None are removed; metageneration increases."""
        obj = self.get(bucket, name, generation)
        check_preconditions(obj, **(preconditions or {}))
        before = (obj.content_type, obj.metadata, obj.extra, obj.metageneration, obj.updated)
        try:
            self._patch(bucket, obj, changes)
        except BaseException:
            obj.content_type, obj.metadata, obj.extra, obj.metageneration, obj.updated = before
            obj._json = None
            raise
        return obj

    def backdate(self, bucket: str, name: str, seconds: float) -> Obj:
        """Move a live object's timeCreated and updated `seconds` into the past, as if written then (a control
        for tests of what judges age, such as `fluxfs cleanup --older-than`)."""
        obj = self.get(bucket, name)
        obj.created -= seconds
        obj.updated -= seconds
        obj._json = None
        if self.persist:
            with disk_writes(f"the metadata of {bucket}/{obj.name}"):
                self.persist.save_meta(bucket, obj)
        return obj

    def _patch(self, bucket: str, obj: Obj, changes: Dict[str, Any]) -> None:
        if "contentType" in changes:
            obj.content_type = changes["contentType"] or "application/octet-stream"
        if "metadata" in changes:
            new = changes["metadata"]
            if new is None:
                obj.metadata = None
            else:
                md = dict(obj.metadata or {})
                for k, v in new.items():
                    if v is None:
                        md.pop(k, None)
                    else:
                        md[k] = str(v)
                obj.metadata = md or None
        for k in EXTRA_FIELDS:
            if k in changes:
                ex = dict(obj.extra or {})
                if changes[k] is None:
                    ex.pop(k, None)
                else:
                    ex[k] = changes[k]
                obj.extra = ex or None
        obj.metageneration += 1
        obj.updated = time.time()
        obj._json = None
        if self.persist:
            with disk_writes(f"the metadata of {bucket}/{obj.name}"):
                if obj.deleted is not None:
                    self.persist.save_noncurrent(bucket, obj)
                else:
                    self.persist.save_meta(bucket, obj)

    def list(self, bucket: str, prefix: str = "", delimiter: str = "", start_offset: str = "",
             end_offset: str = "", resume: str = "", max_results: int = 1000,
             include_trailing: bool = False, raw: bool = False) -> Tuple[List[Any], List[str], Optional[str]]:
        """One page: (objects, prefixes, resume key of the next page or None). O(log N + page).

        ``raw``: objects come as (name, Obj or SynthBatch) index entries, so a renderer that knows
        synthetic batches (objjson) needs no per-object Obj."""
        b = self.bucket(bucket)
        objects: SortedDict = b.objects
        view = (lambda k: (k, objects[k])) if raw else b.view
        start = max(prefix, start_offset, resume)
        items: List[Obj] = []
        prefixes: List[str] = []
        if not delimiter:  # flat listings (the common case): one bounded scan, nothing to jump over
            nxt = None
            it = objects.irange(minimum=start, maximum=end_offset or None, inclusive=(True, False))
            for key in it:
                if not key.startswith(prefix):
                    self.keys_scanned += 1
                    break
                if len(items) >= max_results:
                    self.keys_scanned += 1
                    nxt = key
                    break
                items.append(view(key))
            self.keys_scanned += len(items)
            return items, prefixes, nxt
        n = 0
        while True:
            # Restartable scan: after a delimiter prefix we jump past all its names (one bisect).
            jumped = False
            for key in objects.irange(minimum=start):
                self.keys_scanned += 1
                if end_offset and key >= end_offset:
                    return items, prefixes, None
                if not key.startswith(prefix):
                    return items, prefixes, None
                if n >= max_results:
                    return items, prefixes, key
                if delimiter:
                    i = key.find(delimiter, len(prefix))
                    if i >= 0:
                        p = key[:i + len(delimiter)]
                        prefixes.append(p)
                        n += 1
                        if include_trailing and key == p:
                            items.append(view(key))
                        start = prefix_successor(p)
                        jumped = True
                        break
                items.append(view(key))
                n += 1
            if not jumped:
                return items, prefixes, None

    def list_versions(self, bucket: str, prefix: str = "", delimiter: str = "", start_offset: str = "",
                      end_offset: str = "", resume: Optional[Tuple[str, int]] = None, max_results: int = 1000
                      ) -> Tuple[List[Any], List[str], Optional[Tuple[str, int]]]:
        """One page of a ``versions=true`` listing: every generation, as (name, Obj or SynthBatch) entries."""
        return versions.list_versions(self.bucket(bucket), prefix, delimiter, start_offset, end_offset, resume,
                                      max_results)

    def generate(self, bucket: str, count: int, size: SizeSpec = 1024, prefix: str = "", seed: int = 0) -> int:
        """Create ``count`` synthetic objects ``{prefix}{i:08d}`` in bulk (no bodies stored)."""
        b = self.buckets.get(bucket) or self.create_bucket(bucket)
        gen = self.next_generation()
        now = time.time()
        fixed = size if isinstance(size, int) else None
        if fixed is not None and fixed < 0:
            raise ValueError("size must be >= 0")
        if count <= 0:
            return 0
        # All names share the prefix and differ only in digits: checking the longest one suffices.
        validate_object_name(f"{prefix}{count - 1:08d}")
        if not isinstance(size, int):
            lo, hi = size
            if lo < 0 or lo > hi:
                raise ValueError(f"bad size range {size!r}")
        batch = SynthBatch(gen, now, size, seed)
        new = dict.fromkeys([f"{prefix}{i:08d}" for i in range(count)], batch)
        if self.persist:
            with disk_writes(f"{count} synthetic objects in {bucket}"):
                self.persist.save_batch(bucket, gen, count, size, prefix, seed, now)
        b.objects.update(new)
        return count

    def iter_objects(self, bucket: str) -> Iterator[Obj]:
        b = self.bucket(bucket)
        return (b.lookup(k) for k in list(b.objects.keys()))

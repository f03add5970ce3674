"""Buckets, objects and generations behind the server, with a sorted index and optional disk persistence.

Everything here is synchronous and runs on the server's event loop; the HTTP layers
(json_routes, xml_routes) translate requests into these calls.
"""
from __future__ import annotations

import base64
import hashlib
import threading
import time
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Dict, Iterator, List, Optional, Tuple
from urllib.parse import quote

import google_crc32c
from sortedcontainers import SortedDict

from ..gcs.checksums import crc_from_b64, crc_to_b64
from ..gcs.chunks import Chunked
from .errors import ServerError
from .synthetic import SizeSpec, synthetic_range, synthetic_size

# Bucket names: GCS rules, simplified (3-63 chars of lowercase letters, digits, - _ .).
_BUCKET_CHARS = set("abcdefghijklmnopqrstuvwxyz0123456789-_.")


def b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode("ascii")


@lru_cache(maxsize=65536)  # listings of synthetic objects build them afresh: their crc32c is remembered here
def synthetic_crc32c(name: str, size: int, seed: int) -> str:
    return crc_to_b64(google_crc32c.value(bytes(synthetic_range(name, size, seed, 0, size))))


@lru_cache(maxsize=4096)
def rfc3339(ts: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ts)) + ".%03dZ" % int((ts % 1) * 1000)


class Obj:
    """One live object. The body is bytes in memory, a file on disk, or a synthetic spec (seed)."""

    __slots__ = ("name", "size", "generation", "metageneration", "content_type", "metadata", "created",
                 "updated", "component_count", "_md5", "_crc", "data", "path", "seed", "extra", "_json")

    def __init__(self, name: str, size: int, generation: int, *, content_type: str = "application/octet-stream",
                 metadata: Optional[Dict[str, str]] = None, created: Optional[float] = None,
                 data: Optional[bytes] = None, path: Optional[str] = None, seed: Optional[int] = None,
                 md5: Optional[str] = None, crc: Optional[str] = None, component_count: Optional[int] = None,
                 extra: Optional[Dict[str, Any]] = None, metageneration: int = 1):
        self.name = name
        self.size = size
        self.generation = generation
        self.metageneration = metageneration
        self.content_type = content_type
        self.metadata = metadata
        self.created = created if created is not None else time.time()
        self.updated = self.created
        self.component_count = component_count
        self._md5 = md5
        self._crc = crc
        self.data = data
        self.path = path
        self.seed = seed
        self.extra = extra
        # Rendered JSON per field set (objjson.py): None until rendered and after a change; False = never cache.
        self._json: Any = None

    def read(self, start: int = 0, end: Optional[int] = None):
        """Bytes [start, end) of the body (a memoryview for in-memory bodies: no copy)."""
        end = self.size if end is None else min(end, self.size)
        if start >= end:
            return b""
        if self.data is not None:
            if self.data.__class__ is Chunked:
                return self.data.slice(start, end)
            if start == 0 and end == self.size:
                return self.data  # immutable bytes: the whole body needs no view
            return memoryview(self.data)[start:end]
        if self.seed is not None:
            return synthetic_range(self.name, self.size, self.seed, start, end)
        with open(self.path, "rb") as f:
            f.seek(start)
            return f.read(end - start)

    # Hashes of synthetic and reloaded bodies are computed on first use, each on its own: a list
    # page asking for crc32c of 1,000 synthetic objects must not pay for their md5 too.
    @property
    def crc32c(self) -> str:
        if self._crc is None:
            if self.seed is not None and self.data is None:
                self._crc = synthetic_crc32c(self.name, self.size, self.seed)
            else:
                self._crc = crc_to_b64(google_crc32c.value(bytes(self.read())))
        return self._crc

    @property
    def crc32c_int(self) -> int:
        return crc_from_b64(self.crc32c)

    @property
    def md5(self) -> Optional[str]:
        """None for composite objects and XML multipart uploads (stored with md5 ""), as in GCS."""
        if self.component_count is not None or self._md5 == "":
            return None
        if self._md5 is None:
            self._md5 = b64(hashlib.md5(self.read()).digest())
        return self._md5

    @property
    def etag(self) -> str:
        return f"{self.generation}-{self.metageneration}"

    def resource(self, bucket: str, base_url: str, want: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
        """The JSON API object resource; with ``want`` (a fields tree) only those fields are built,
        which keeps list pages with ``fields=items(name,size)`` cheap."""
        r: Dict[str, Any] = {}
        need = _ALL if want is None else want
        if "kind" in need:
            r["kind"] = "storage#object"
        if "id" in need:
            r["id"] = f"{bucket}/{self.name}/{self.generation}"
        if "selfLink" in need or "mediaLink" in need:
            qn = quote(self.name, safe="")
            r["selfLink"] = f"{base_url}/storage/v1/b/{bucket}/o/{qn}"
            r["mediaLink"] = (f"{base_url}/download/storage/v1/b/{bucket}/o/{qn}"
                              f"?generation={self.generation}&alt=media")
        r["name"] = self.name
        r["bucket"] = bucket
        r["generation"] = str(self.generation)
        r["metageneration"] = str(self.metageneration)
        r["contentType"] = self.content_type
        r["storageClass"] = "STANDARD"
        r["size"] = str(self.size)
        if "crc32c" in need:
            r["crc32c"] = self.crc32c
        if "md5Hash" in need and self.md5 is not None:
            r["md5Hash"] = self.md5
        if "etag" in need:
            r["etag"] = self.etag
        if "timeCreated" in need or "updated" in need or "timeStorageClassUpdated" in need:
            r["timeCreated"] = r["timeStorageClassUpdated"] = rfc3339(self.created)
            r["updated"] = rfc3339(self.updated)
        if self.component_count is not None:
            r["componentCount"] = self.component_count
        if self.metadata:
            r["metadata"] = dict(self.metadata)
        if self.extra:
            r.update(self.extra)
        return r


_ALL = frozenset(("kind", "id", "selfLink", "mediaLink", "crc32c", "md5Hash", "etag", "timeCreated", "updated",
                  "timeStorageClassUpdated"))


_EMPTY_CRC = crc_to_b64(google_crc32c.value(b""))
_EMPTY_MD5 = b64(hashlib.md5(b"").digest())

# Writable object resource fields kept verbatim (besides contentType and metadata).
EXTRA_FIELDS = ("contentEncoding", "contentDisposition", "contentLanguage", "cacheControl", "customTime")


class SynthBatch:
    """Stands in the index for every object of one ``generate`` call until the object is first used:
    1M synthetic objects then cost one dict entry each, not one Python object each."""

    __slots__ = ("generation", "created", "size", "seed", "json_tpl")

    def __init__(self, generation: int, created: float, size: SizeSpec, seed: int):
        self.generation, self.created, self.size, self.seed = generation, created, size, seed
        self.json_tpl: Optional[Dict[Any, Tuple[str, Optional[str]]]] = None  # objjson's per-batch templates

    def obj(self, name: str) -> Obj:
        size = self.size if isinstance(self.size, int) else synthetic_size(name, self.size, self.seed)
        if size == 0:  # empty bodies share their hashes: nothing to compute per object
            return Obj(name, 0, self.generation, created=self.created, seed=self.seed, crc=_EMPTY_CRC, md5=_EMPTY_MD5)
        return Obj(name, size, self.generation, created=self.created, seed=self.seed)


@dataclass
class Bucket:
    name: str
    created: float = field(default_factory=time.time)
    metageneration: int = 1
    labels: Optional[Dict[str, str]] = None
    objects: SortedDict = field(default_factory=SortedDict)  # name -> Obj or SynthBatch

    def lookup(self, name: str) -> Optional[Obj]:
        """The live object ``name`` (materialized from its synthetic batch on first use) or None."""
        v = self.objects.get(name)
        if v.__class__ is SynthBatch:
            v = v.obj(name)
            self.objects[name] = v
        return v

    def view(self, name: str) -> Obj:
        """Like lookup, for listing: a synthetic object is built but not kept, so a list page costs
        the same whether or not its objects were touched before."""
        v = self.objects[name]
        if v.__class__ is SynthBatch:
            v = v.obj(name)
            v._json = False  # transient: objjson renders it without caching
        return v

    def resource(self, base_url: str) -> Dict[str, Any]:
        r = {"kind": "storage#bucket", "id": self.name, "name": self.name,
             "selfLink": f"{base_url}/storage/v1/b/{self.name}", "projectNumber": "0",
             "metageneration": str(self.metageneration), "location": "US", "storageClass": "STANDARD",
             "etag": f"CA{self.metageneration}=", "timeCreated": rfc3339(self.created),
             "updated": rfc3339(self.created), "locationType": "multi-region"}
        if self.labels:
            r["labels"] = dict(self.labels)
        return r


def check_preconditions(obj: Optional[Obj], if_gen: Optional[int] = None, if_gen_not: Optional[int] = None,
                        if_meta: Optional[int] = None, if_meta_not: Optional[int] = None,
                        read: bool = False) -> None:
    """Raise 412 (or 304 for failed NotMatch conditions on reads) as GCS does."""
    if if_gen is not None:
        if if_gen == 0:
            if obj is not None:
                raise ServerError(412, "At least one of the pre-conditions you specified did not hold "
                                       "(ifGenerationMatch=0: object already exists).")
        elif obj is None or obj.generation != if_gen:
            raise ServerError(412, "At least one of the pre-conditions you specified did not hold "
                                   f"(ifGenerationMatch={if_gen}).")
    if if_meta is not None and (obj is None or obj.metageneration != if_meta):
        raise ServerError(412, "At least one of the pre-conditions you specified did not hold "
                               f"(ifMetagenerationMatch={if_meta}).")
    if if_gen_not is not None and obj is not None and obj.generation == if_gen_not:
        raise ServerError(304 if read else 412, f"Precondition ifGenerationNotMatch={if_gen_not} did not hold.")
    if if_meta_not is not None and obj is not None and obj.metageneration == if_meta_not:
        raise ServerError(304 if read else 412, f"Precondition ifMetagenerationNotMatch={if_meta_not} did not hold.")


def prefix_successor(p: str) -> str:
    """The smallest string greater than every string starting with p (p non-empty)."""
    return p[:-1] + chr(ord(p[-1]) + 1)


def validate_bucket_name(name: str) -> None:
    if not (3 <= len(name) <= 222) or not set(name) <= _BUCKET_CHARS or name[0] in "-_." or name[-1] in "-_.":
        raise ServerError(400, f"Invalid bucket name: {name!r}")


def validate_object_name(name: str) -> None:
    if not name:
        raise ServerError(400, "Object name must not be empty.", "required")
    try:
        encoded = name.encode("utf-8")
    except UnicodeEncodeError:
        raise ServerError(400, "Object names must be valid UTF-8.") from None
    if len(encoded) > 1024:
        raise ServerError(400, "Object name is longer than 1024 bytes.")
    if name in (".", "..") or "\r" in name:
        raise ServerError(400, f"Invalid object name: {name!r}")


class Store:
    """All buckets. ``root`` set -> every change is also written to disk (atomically) and reloaded on start."""

    def __init__(self, root: Optional[str] = None):
        self.buckets: Dict[str, Bucket] = {}
        self.keys_scanned = 0  # index entries visited by list(): shows a page costs O(page), not O(bucket)
        self._last_gen = 0
        self._lock = threading.Lock()
        self.persist = None
        if root:
            from .persist import Persistence
            self.persist = Persistence(root)
            self.persist.load(self)

    # -- generations --
    def next_generation(self) -> int:
        """Microsecond timestamps like GCS, forced strictly increasing."""
        with self._lock:
            g = max(time.time_ns() // 1000, self._last_gen + 1)
            self._last_gen = g
            return g

    def note_generation(self, g: int) -> None:
        self._last_gen = max(self._last_gen, g)

    # -- buckets --
    def create_bucket(self, name: str, labels: Optional[Dict[str, str]] = None, exist_ok: bool = False) -> Bucket:
        validate_bucket_name(name)
        if name in self.buckets:
            if exist_ok:
                return self.buckets[name]
            raise ServerError(409, f"Your previous request to create the named bucket succeeded and you already "
                                   f"own it: {name}", "conflict", "BucketAlreadyOwnedByYou")
        b = Bucket(name, labels=labels)
        self.buckets[name] = b
        if self.persist:
            self.persist.save_bucket(b)
        return b

    def bucket(self, name: str) -> Bucket:
        b = self.buckets.get(name)
        if b is None:
            raise ServerError(404, f"The specified bucket does not exist: {name}", "notFound", "NoSuchBucket")
        return b

    def delete_bucket(self, name: str) -> None:
        b = self.bucket(name)
        if b.objects:
            raise ServerError(409, f"The bucket you tried to delete is not empty: {name}", "conflict",
                              "BucketNotEmpty")
        del self.buckets[name]
        if self.persist:
            self.persist.delete_bucket(name)

    # -- objects --
    def get(self, bucket: str, name: str, generation: Optional[int] = None) -> Obj:
        obj = self.bucket(bucket).lookup(name)
        if obj is None or (generation is not None and obj.generation != generation):
            raise ServerError(404, f"No such object: {bucket}/{name}", "notFound", "NoSuchKey")
        return obj

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
        if data.__class__ is not Chunked or self.persist:
            data = bytes(data)
        if crc is None:
            crc = crc_to_b64(google_crc32c.value(data))
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
        obj = Obj(name, len(data), self.next_generation(), content_type=content_type or "application/octet-stream",
                  metadata=metadata or None, data=data, md5=md5, crc=crc, component_count=component_count,
                  extra=extra or None)
        if self.persist:
            self.persist.save_object(bucket, obj, old)  # moves the body to disk (obj.data -> obj.path)
        b.objects[name] = obj
        return obj

    def delete(self, bucket: str, name: str, generation: Optional[int] = None,
               preconditions: Optional[Dict[str, Optional[int]]] = None) -> None:
        b = self.bucket(bucket)
        obj = self.get(bucket, name, generation)
        check_preconditions(obj, **(preconditions or {}))
        del b.objects[name]
        if self.persist:
            self.persist.delete_object(bucket, obj)

    def patch(self, bucket: str, name: str, changes: Dict[str, Any], generation: Optional[int] = None,
              preconditions: Optional[Dict[str, Optional[int]]] = None) -> Obj:
        """Update metadata fields; metadata keys set to None are removed; metageneration increases."""
        obj = self.get(bucket, name, generation)
        check_preconditions(obj, **(preconditions or {}))
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
            self.persist.save_meta(bucket, obj)
        return obj

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
            self.persist.save_batch(bucket, gen, count, size, prefix, seed, now, ())
        b.objects.update(new)
        return count

    def iter_objects(self, bucket: str) -> Iterator[Obj]:
        b = self.bucket(bucket)
        return (b.lookup(k) for k in list(b.objects.keys()))

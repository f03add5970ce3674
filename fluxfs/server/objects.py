"""The object record (``Obj``): its body (bytes, chunks, a file or a synthetic spec), hashes computed
on first use, and its JSON API resource; ``SynthBatch`` stands in for objects of one ``generate`` call."""
from __future__ import annotations

import base64
import hashlib
import time
from functools import lru_cache
from typing import Any, Dict, Optional, Tuple
from urllib.parse import quote

from ..gcs.checksums import crc32c, crc_from_b64, crc_to_b64
from ..gcs.chunks import Chunked
from .synthetic import SizeSpec, synthetic_range, synthetic_size
from .timestamps import rfc3339

# Writable object resource fields kept verbatim (besides contentType and metadata).
EXTRA_FIELDS = ("contentEncoding", "contentDisposition", "contentLanguage", "cacheControl", "customTime")
# The XML API's headers for them (on a PUT or a multipart initiate).
XML_FIELD_HEADERS = {"content-encoding": "contentEncoding", "content-disposition": "contentDisposition",
                     "content-language": "contentLanguage", "cache-control": "cacheControl",
                     "x-goog-custom-time": "customTime"}


def with_kms_key(extra: Dict[str, Any], kms_key_name: Optional[str]) -> Dict[str, Any]:
    """`extra` plus the KMS key an upload named (``kmsKeyName`` parameter, ``x-goog-encryption-kms-key-name``):
    kept and returned as the resource's kmsKeyName, as GCS does (no encryption here)."""
    if kms_key_name:
        extra = {**extra, "kmsKeyName": kms_key_name}
    return extra


def b64(raw: bytes) -> str:
    """Standard base64 text, as GCS writes md5Hash."""
    return base64.b64encode(raw).decode("ascii")


@lru_cache(maxsize=65536)  # listings of synthetic objects build them afresh: their crc32c is remembered here
def synthetic_crc32c(name: str, size: int, seed: int) -> str:
    """crc32c (base64) of a synthetic object's content."""
    return crc_to_b64(crc32c(bytes(synthetic_range(name, size, seed, 0, size))))


class Obj:
    """One live object. The body is bytes in memory, a file on disk, or a synthetic spec (seed)."""

    __slots__ = ("name", "size", "generation", "metageneration", "content_type", "metadata", "created",
                 "updated", "component_count", "_md5", "_crc", "data", "path", "seed", "extra", "_json",
                 "deleted")

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
        self.deleted: Optional[float] = None  # when it became noncurrent (versioned buckets): timeDeleted
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
                self._crc = crc_to_b64(crc32c(bytes(self.read())))
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
        if self.deleted is not None:
            r["timeDeleted"] = rfc3339(self.deleted)
        if self.component_count is not None:
            r["componentCount"] = self.component_count
        if self.metadata:
            r["metadata"] = dict(self.metadata)
        if self.extra:
            r.update(self.extra)
        return r


_ALL = frozenset(("kind", "id", "selfLink", "mediaLink", "crc32c", "md5Hash", "etag", "timeCreated", "updated",
                  "timeStorageClassUpdated"))


_EMPTY_CRC = crc_to_b64(crc32c(b""))
_EMPTY_MD5 = b64(hashlib.md5(b"").digest())



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

    def view(self, name: str) -> Obj:
        """A transient Obj for ``name``, for listing: not kept in the index, rendered without caching."""
        o = self.obj(name)
        o._json = False
        return o

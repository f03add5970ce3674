"""The store's object record as the gRPC API's `google.storage.v2.Object` (the client library's own message
type): an unfinalized appendable object has no finalize_time, every other object is finalized."""
from __future__ import annotations

import base64
from typing import Any

from google.cloud._storage_v2 import types as v2

from ..objects import Obj

Object = v2.Object.pb()
_EXTRA = {"contentEncoding": "content_encoding", "contentDisposition": "content_disposition",
          "contentLanguage": "content_language", "cacheControl": "cache_control"}


def object_pb(bucket: Any, obj: Obj, finalized: bool = True) -> Any:
    """`obj` of `bucket` (a Bucket record) as an Object message."""
    o = Object(name=obj.name, bucket=f"projects/_/buckets/{bucket.name}", generation=obj.generation,
               metageneration=obj.metageneration, size=obj.size, content_type=obj.content_type,
               storage_class=str(bucket.layout.get("storageClass", "STANDARD")), etag=obj.etag)
    o.create_time.FromNanoseconds(int(obj.created * 1e9))
    o.update_time.FromNanoseconds(int(obj.updated * 1e9))
    o.update_storage_class_time.FromNanoseconds(int(obj.created * 1e9))
    o.checksums.crc32c = obj.crc32c_int  # of the persisted bytes while appendable
    if finalized:
        o.finalize_time.FromNanoseconds(int(obj.updated * 1e9))
        md5 = obj.md5
        if md5:
            o.checksums.md5_hash = base64.b64decode(md5)
    if obj.component_count is not None:
        o.component_count = obj.component_count
    if obj.metadata:
        o.metadata.update(obj.metadata)
    for k, field in _EXTRA.items():
        if obj.extra and obj.extra.get(k):
            setattr(o, field, obj.extra[k])
    return o


def extra_of(res: Any) -> Any:
    """The JSON fields besides content type and metadata that a write's Object message sets (cache control,
    content disposition/encoding/language, custom time), as the store keeps them; None when there are none."""
    out = {k: getattr(res, field) for k, field in _EXTRA.items() if getattr(res, field)}
    if res.HasField("custom_time"):
        out["customTime"] = res.custom_time.ToJsonString()
    return out or None

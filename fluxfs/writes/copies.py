"""Object copies where a zonal (Rapid) bucket is the source or the destination: GCS has no rewrite (nor copy)
there, so the bytes are read and written instead, through fluxfs's own read and write paths.

gcsfs's `ExtendedGcsFileSystem` raises NotImplementedError for these; here `cp`/`copy` stream the object
(ranged reads pinned to the source's generation, the write pipeline of `pipe_file`), keeping what a
server-side copy keeps (content type, custom metadata, content encoding/disposition/language, cache
control, custom time), and checking the bytes read against the source's crc32c before the destination
is committed: a failure leaves the destination as it was. `mv` is gcsfs's copy then delete, so the
source is deleted only once the destination is complete. `FluxFileSystem._cp_file` calls `cp_file`, handing it
the client, gcsfs's own `_cp_file` and its `_cat_file` (never itself).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Awaitable, Callable

from ..errors import ChecksumMismatch
from ..gcs import http
from ..zonal import transport
from ..gcs.checksums import crc32c, crc32c_combine, crc_from_b64
from .bodies import DEFAULT_CONTENT_TYPE
from .fields import FIXED_KEYS, ObjectFields
from .uploads import upload_stream

if TYPE_CHECKING:  # pragma: no cover
    from ..gcs.client import Client

# What a server-side copy carries over besides contentType and metadata (JSON resource names).
_KEPT = tuple(FIXED_KEYS.values())


Fetch = Callable[..., Awaitable[Any]]  # an async call: gcsfs's `_cp_file`, the filesystem's `_cat_file`


async def cp_file(client: "Client", rewrite: Fetch, cat_file: Fetch, path1: str, path2: str, acl: Any = None,
                  **kwargs: Any) -> Any:
    """Copy one object: gcsfs's rewrite (`rewrite`) between standard buckets; streamed (read with `cat_file`,
    then written) when the source or destination bucket is zonal."""
    b1, _, _ = client.split_path(path1)
    b2, _, g2 = client.split_path(path2)
    if g2 or ((await transport.of(client, b1)).rewrite and (await transport.of(client, b2)).rewrite):
        return await rewrite(path1, path2, acl=acl, **kwargs)
    if acl is not None:
        raise ValueError(f"cp {path1} -> {path2}: acl={acl!r} cannot be applied: a copy to or from a zonal "
                         "bucket is a new upload (no rewrite there), and zonal buckets have uniform access")
    return await copy_streamed(client, cat_file, path1, path2)


async def object_resource(client: "Client", path: str) -> dict:
    """The object's whole resource, asked of the server: a listing's cached entry may lack its metadata (the
    parallel lister asks for a few fields). A path with no object (a directory) is FileNotFoundError."""
    bucket, key, generation = client.split_path(path)
    resp = await http.request(client, "GET", client.json_url("b/{}/o/{}", bucket, key), op="metadata",
                              what=f"{bucket}/{key}", params={"generation": generation} if generation else None)
    return client.object_info(bucket, resp.json())


async def copy_streamed(client: "Client", cat_file: Fetch, path1: str, path2: str) -> dict:
    """Copy object `path1` to `path2` by reading and writing it (`cat_file` ranges, `upload_stream`)."""
    info = await object_resource(client, path1)
    bucket, key, _ = client.split_path(path1)
    generation, size = info.get("generation"), int(info["size"])
    expected = crc_from_b64(info.get("crc32c"))
    pos, crc = 0, 0

    async def read(n: int) -> bytes:
        nonlocal pos, crc
        data = await cat_file(f"{bucket}/{key}", start=pos, end=pos + n, generation=generation)
        if len(data) != n:
            raise ChecksumMismatch(f"cp {path1} -> {path2}: read {len(data)} bytes at offset {pos} where "
                                   f"{n} were expected (generation {generation}); nothing written")
        crc = crc32c_combine(crc, crc32c(data), len(data))
        pos += n
        if pos == size and expected is not None and crc != expected:
            raise ChecksumMismatch(f"cp {path1} -> {path2}: the bytes read do not match the source's crc32c "
                                   f"(generation {generation}); nothing written")
        return data

    def rewind() -> None:
        nonlocal pos, crc
        pos, crc = 0, 0

    fixed = {k: str(info[k]) for k in _KEPT if info.get(k) not in (None, "")}
    fields = ObjectFields(content_type=info.get("contentType") or DEFAULT_CONTENT_TYPE,
                          metadata=dict(info["metadata"]) if info.get("metadata") else None, fixed=fixed)
    return await upload_stream(client, path2, size, read, fields=fields, rewind=rewind)

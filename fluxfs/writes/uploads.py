"""Whole-object uploads for `pipe_file` and `put_file`: bytes in memory or a local file, cut into
parts and sent through the same pipeline and strategy as the "wb" handle (run on the loop)."""
from __future__ import annotations

import asyncio
import logging
import os
from typing import TYPE_CHECKING, Any, Awaitable, Callable

from ..errors import UploadLost
from .fields import ObjectFields, object_fields
from .parts import PartWriter
from .schedule import beyond_reach, fixed_part_size, max_part
from .settings import destination, object_path, upload_settings

if TYPE_CHECKING:  # pragma: no cover
    from ..gcs.client import Client

logger = logging.getLogger(__name__)


async def _upload_chunks(client: "Client", path: str, size: int, read: Callable[[int], Awaitable[bytes]], *,
                         create_only: bool, fields: ObjectFields, callback: Any = None,
                         rewind: Callable[[], None] | None = None) -> dict:
    """Upload `size` bytes obtained part by part from `read(n)`; aborts everything on any failure.

    The data is still in hand (`rewind()` starts `read` over), so an upload the server lost (a
    restart, `fluxfs cleanup` elsewhere) is started over once.
    """
    try:
        return await _upload_once(client, path, size, read, create_only=create_only, fields=fields, callback=callback)
    except UploadLost as exc:
        if rewind is None:
            raise
        logger.warning("%s; starting the upload over", exc)
        rewind()
        if callback is not None:
            callback.relative_update(-callback.value)
    return await _upload_once(client, path, size, read, create_only=create_only, fields=fields, callback=callback)


async def _upload_once(client: "Client", path: str, size: int, read: Callable[[int], Awaitable[bytes]], *,
                       create_only: bool, fields: ObjectFields, callback: Any = None) -> dict:
    bucket, key = object_path(client, path)
    dest = await destination(client, bucket, f"{bucket}/{key}")
    part, conc, uploader = upload_settings(client, fields=fields, dest=dest)
    cap = uploader.part_cap(client)
    if cap is not None:  # equal parts, as few as the cap allows (XML: 10,000; compose: compose_max_components)
        part = fixed_part_size(size, part, cap)
        largest = max_part(client)
        if part > largest:
            raise ValueError(beyond_reach(path, size, cap, largest, client.options.write_memory,
                                          getattr(uploader, "cap_setting", None)))
    pw = PartWriter(client, bucket, key, uploader, concurrency=conc, create_only=create_only, fields=fields)
    try:
        done = 0
        while size - done > part:
            chunk = await read(part)
            await pw.add_part(chunk)
            done += len(chunk)
            if callback is not None:
                callback.relative_update(len(chunk))
        tail = await read(size - done)
        info = await pw.finish(tail)
        if callback is not None:
            callback.relative_update(len(tail))
    except BaseException:
        await pw.abort()
        raise
    await client.written(info["name"])  # gcsfs's: only the parent's listing when it is cached
    return info


async def upload_stream(client: "Client", path: str, size: int, read: Callable[[int], Awaitable[bytes]], *,
                        fields: ObjectFields, create_only: bool = False,
                        rewind: Callable[[], None] | None = None) -> dict:
    """Upload `size` bytes that `read(n)` returns part by part (an object being copied); aborts on any failure,
    starts over once through `rewind()` when the server lost the upload."""
    return await _upload_chunks(client, path, size, read, create_only=create_only, fields=fields, rewind=rewind)


async def write_bytes(client: "Client", path: str, data: Any, *, create_only: bool = False,
                      fields: ObjectFields | None = None) -> dict:
    """Upload `data` (any bytes-like) as one object through the configured strategy; returns its info.

    `fields`: what the object stores besides its bytes (default: the content type guessed from the key).
    """
    if fields is None:
        fields = object_fields(path)
    mv = memoryview(data).cast("B") if not isinstance(data, bytes) else memoryview(data)
    pos = 0

    async def read(n: int) -> bytes:
        nonlocal pos
        out = bytes(mv[pos:pos + n])
        pos += n
        return out

    def rewind() -> None:
        nonlocal pos
        pos = 0

    return await _upload_chunks(client, path, mv.nbytes, read, create_only=create_only, fields=fields, rewind=rewind)


async def upload_local_file(client: "Client", lpath: str, rpath: str, *, create_only: bool = False,
                            fields: ObjectFields | None = None, callback: Any = None) -> dict:
    """Upload a local file part by part (reads run in a thread, memory stays bounded).

    `fields` default: the content type guessed from the local file's name, as gcsfs does.
    """
    if fields is None:
        fields = object_fields(rpath, guess_from=lpath)
    loop = asyncio.get_running_loop()
    with open(lpath, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if callback is not None:
            callback.set_size(size)

        async def read(n: int) -> bytes:
            data = await loop.run_in_executor(None, f.read, n)
            if len(data) != n:
                raise OSError(f"{lpath} changed size while being uploaded")
            return data

        return await _upload_chunks(client, rpath, size, read, create_only=create_only, fields=fields,
                                    callback=callback, rewind=lambda: f.seek(0))

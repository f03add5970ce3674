"""`FluxFileSystem`: gcsfs plus fluxfs's accelerations, registered for ``flux://`` URLs.

It subclasses ``gcsfs.core.GCSFileSystem`` (not ``gcsfs.GCSFileSystem``, whose bucket-layout
gRPC lookup stalls against any emulator). Listing, many-object reads and writes are
delegated to `listing`, `compose_reads`, `read_file` and `multipart`.
"""
from __future__ import annotations

import asyncio
import os
from typing import Any, AsyncIterator, Iterator
from urllib.parse import quote, urlsplit

from fsspec.asyn import get_loop
from gcsfs.core import GCSFileSystem

from . import http, tempnames
from .retry import RetryPolicy, resolve_policies


def _is_loopback(endpoint_url: str | None) -> bool:
    """True when the endpoint (or STORAGE_EMULATOR_HOST) is an address on this machine."""
    url = endpoint_url or os.environ.get("STORAGE_EMULATOR_HOST", "")
    if not url:
        return False
    host = urlsplit(url if "://" in url else f"http://{url}").hostname or ""
    return host in ("localhost", "::1") or host.startswith("127.")


class FluxFileSystem(GCSFileSystem):
    """fsspec filesystem for Google Cloud Storage with parallel listing, compose reads and multipart writes."""

    protocol = ("flux",)

    def __init__(
        self,
        *args: Any,
        list_concurrency: int | None = None,
        list_page_size: int = 1000,
        compose: bool = True,
        max_composite_size: int | None = None,
        compose_threshold: int | None = None,
        read_concurrency: int | None = None,
        multipart: str = "xml",
        part_size: int | None = None,
        write_concurrency: int | None = None,
        retry: Any = None,
        read_timeout: float = 60.0,
        job_id: str | None = None,
        progress: bool = False,
        **kwargs: Any,
    ):
        if (kwargs.get("token") is None and not args and _is_loopback(kwargs.get("endpoint_url"))
                and not os.environ.get("GOOGLE_APPLICATION_CREDENTIALS")):
            # A server on this machine (the embedded one, an emulator) needs no credentials unless
            # ADC names a key file, and gcsfs's default chain would probe the GCE metadata server.
            kwargs["token"] = "anon"
        super().__init__(*args, **kwargs)
        if multipart not in ("xml", "compose", "off"):
            raise ValueError(f"multipart must be 'xml', 'compose' or 'off', not {multipart!r}")
        if not 1 <= list_page_size <= 1000:
            raise ValueError(f"list_page_size must be between 1 and 1000 (GCS's cap), not {list_page_size}")
        self.list_concurrency = list_concurrency
        self.list_page_size = list_page_size
        self.compose = compose
        self.max_composite_size = max_composite_size
        self.compose_threshold = compose_threshold
        self.read_concurrency = read_concurrency
        self.multipart = multipart
        self.part_size = part_size
        self.write_concurrency = write_concurrency
        self._retry_policies = resolve_policies(retry)
        self.http_timeout = http.client_timeout(read_timeout)
        self._job_id = job_id
        self._job_pid: int | None = None
        self.progress = progress

    # -- plumbing shared by the accelerations ---------------------------------------------

    @property
    def loop(self):
        """fsspec's event loop; in a forked child (a DataLoader worker) a fresh loop and HTTP session.

        fsspec refuses to run a filesystem in a child forked after its loop started; the
        parent's loop thread and sockets do not exist there, so we start over instead.
        """
        if self._pid != os.getpid() and not self.asynchronous:
            self._pid = os.getpid()
            self._loop = get_loop()
            self._session = None
            self._ssl_context_task = None
        return self._loop

    def retry_policy(self, op: str) -> RetryPolicy:
        """The retry policy for an operation kind ("list", "read", "compose", "write", "delete")."""
        return self._retry_policies.get(op) or self._retry_policies["read"]

    @property
    def job_id(self) -> str:
        """Id for this process's temporary objects; regenerated after fork so workers never share one."""
        if self._job_id is not None:
            return self._job_id
        if self._job_pid != os.getpid():
            self._auto_job_id = tempnames.new_job_id()
            self._job_pid = os.getpid()
        return self._auto_job_id

    def json_url(self, fmt: str, *parts: str) -> str:
        """A JSON API URL: `fmt` like "b/{}/o/{}" with each part percent-encoded."""
        return self.base + fmt.format(*(quote(p, safe="") for p in parts))

    def upload_url(self, bucket: str) -> str:
        """The JSON API media upload URL of a bucket."""
        return f"{self._location}/upload/storage/v1/b/{quote(bucket, safe='')}/o"

    def xml_url(self, bucket: str, key: str = "") -> str:
        """An XML API URL (`/BUCKET/KEY`), used for multipart uploads."""
        return f"{self._location}/{quote(bucket, safe='')}/{quote(key, safe='/')}"

    def _open(self, path: str, mode: str = "rb", block_size: int | None = None, **kwargs: Any):
        """Read handles prefetch with parallel ranged GETs; write handles upload parts in parallel, atomically."""
        if "r" in mode:
            from .read_file import FluxReadFile

            return FluxReadFile(self, path, mode, block_size=block_size, **kwargs)
        if mode in ("wb", "xb"):
            from .multipart import FluxWriteFile

            return FluxWriteFile(self, path, mode, block_size=block_size, **kwargs)
        raise ValueError(f"unsupported mode {mode!r} for {path}: use 'rb', 'wb' or 'xb'")

    # -- listing (listing.py, manifest.py) ------------------------------------------------

    async def _iter_objects(
        self, path: str, prefix: str = "", sort: bool = False, batch_size: int | None = None, **kwargs: Any
    ) -> AsyncIterator[list[dict]]:
        """Batches of info dicts for every object under `path` (+ raw key `prefix`), streamed by the parallel lister.

        kwargs: concurrency, page_size, include_temp, progress (see `listing.iter_objects`).
        """
        from . import listing

        async for batch in listing.iter_objects(self, self._strip_protocol(path), prefix, sort, batch_size, **kwargs):
            yield batch

    def iter_objects(
        self, path: str, prefix: str = "", sort: bool = False, batch_size: int | None = None, **kwargs: Any
    ) -> Iterator[list[dict]]:
        """Sync generator over `_iter_objects`: the listing runs on fs.loop while batches are consumed.

        Closing the generator early (break, or garbage collection) cancels the listing.
        """
        from .cleanup import run_sync

        agen = self._iter_objects(path, prefix, sort, batch_size, **kwargs)
        try:
            while True:
                try:
                    # run_sync: a Ctrl-C while waiting cancels the listing before it is re-raised.
                    batch = run_sync(self, agen.__anext__)
                except StopAsyncIteration:
                    return
                yield batch
        finally:
            try:
                running = asyncio.get_running_loop()
            except RuntimeError:
                running = None
            if running is self.loop:
                # Garbage-collected on the loop's own thread: a blocking wait here would deadlock.
                running.create_task(agen.aclose())
            else:
                run_sync(self, agen.aclose)

    async def _find(self, path, maxdepth=None, withdirs=False, detail=False, prefix="", **kwargs):
        """gcsfs's `_find` (same names, same dircache filling) on the parallel lister."""
        from . import listing

        if kwargs.get("versions") or kwargs.get("inventory_report_info"):
            return await super()._find(path, maxdepth=maxdepth, withdirs=withdirs, detail=detail,
                                       prefix=prefix, **kwargs)
        return await listing.find(self, path, maxdepth=maxdepth, withdirs=withdirs, detail=detail,
                                  prefix=prefix, update_cache=kwargs.get("update_cache", True))

    def find(self, path, maxdepth=None, withdirs=False, detail=False, **kwargs):
        """Blocking `_find`; Ctrl-C cancels the listing's workers before it is re-raised."""
        from .cleanup import run_sync

        return run_sync(self, self._find, path, maxdepth=maxdepth, withdirs=withdirs, detail=detail, **kwargs)

    def du(self, path, total=True, maxdepth=None, withdirs=False, **kwargs):
        """Blocking `_du`; Ctrl-C cancels the listing's workers before it is re-raised."""
        from .cleanup import run_sync

        return run_sync(self, self._du, path, total=total, maxdepth=maxdepth, withdirs=withdirs, **kwargs)

    async def _du(self, path, total=True, maxdepth=None, withdirs=False, **kwargs):
        """Sizes from one fast `_find(detail=True)` (fsspec's default asks `_info` object by object)."""
        infos = await self._find(path, maxdepth=maxdepth, withdirs=withdirs, detail=True, **kwargs)
        sizes = {name: info.get("size", 0) or 0 for name, info in infos.items()}
        return sum(sizes.values()) if total else sizes

    def created(self, path):
        """Creation time; a listing's info dicts (in the dircache after `find`) carry no timeCreated: ask the object."""
        info = self.info(path)
        if "ctime" in info:
            return info["ctime"]
        from fsspec.asyn import sync

        bucket, key, _ = self.split_path(path)
        resp = sync(self.loop, http.request, self, "GET", self.json_url("b/{}/o/{}", bucket, key), op="metadata",
                    what=f"{bucket}/{key}", params={"fields": "timeCreated"})
        return self._parse_timestamp(resp.json()["timeCreated"])

    def write_manifest(self, path: str, out: Any, sort: bool = True, progress: Any = None, **kwargs: Any) -> int:
        """Write a JSON-lines manifest of every object under `path` to `out`; returns the object count.

        `out`: a local path, a file object (text or binary), or a URL (flux://, gs://, file://...).
        """
        from .listing import manifest

        return manifest.write_manifest(self, path, out, sort=sort, progress=progress, **kwargs)

    # -- batched reads (compose_reads.py) -------------------------------------------------

    async def _cat(self, path, recursive=False, on_error="raise", batch_size=None, **kwargs):
        """Many paths in one batch: small objects through temporary composites, big ones by parallel ranges.

        Metadata (size, generation, crc32c) comes from the listing cache (after find/ls) or
        from range listings; the bytes returned are always the objects' current ones.
        """
        from . import compose_reads

        if kwargs:  # per-path ranges or options: fsspec's per-file route
            return await super()._cat(path, recursive=recursive, on_error=on_error, batch_size=batch_size, **kwargs)
        paths = await self._expand_path(path, recursive=recursive)
        if len(paths) == 1 and not isinstance(path, list) and paths[0] == self._strip_protocol(path):
            try:
                return await self._cat_file(paths[0])
            except Exception as exc:  # noqa: BLE001 - fsspec returns the exception unless on_error="raise"
                if on_error == "raise":
                    raise
                return exc
        return await compose_reads.cat_paths(self, paths, on_error=on_error, skip_dirs=recursive)

    def cat(self, path, recursive=False, on_error="raise", **kwargs):
        """Blocking `_cat`; Ctrl-C cancels the batch and deletes its temporary objects first."""
        from . import cleanup

        return cleanup.run_sync(self, self._cat, path, recursive=recursive, on_error=on_error, **kwargs)

    @property
    def batch_read_concurrency(self) -> int:
        """Requests a batched read keeps in flight: the `read_concurrency` option or its measured default."""
        from .compose_reads import settings

        return settings(self)[3]

    async def _cat_objects(self, infos, on_error: str = "raise") -> dict:
        """Read objects whose listing info is known (name "bucket/key", size, generation, crc32c): no metadata requests."""
        from . import compose_reads

        return await compose_reads.cat_objects(self, infos, on_error=on_error)

    def cat_objects(self, infos, on_error: str = "raise") -> dict:
        """Blocking `_cat_objects` -> {"bucket/key": bytes | exception}; Ctrl-C cleans up before re-raising."""
        from . import cleanup

        return cleanup.run_sync(self, self._cat_objects, list(infos), on_error=on_error)

    async def _iter_cat_objects(self, infos, on_error: str = "raise",
                                buffer_bytes: int | None = None) -> AsyncIterator[dict]:
        """Read a stream of objects within a memory budget: {"bucket/key": bytes | exception} dicts,
        one per slice, in input order, with about `buffer_bytes` (default 256 MiB) read ahead."""
        from . import stream_reads

        async for batch in stream_reads.aiter_cat_objects(self, infos, on_error=on_error, buffer_bytes=buffer_bytes):
            yield batch

    def iter_cat_objects(self, infos, on_error: str = "raise", buffer_bytes: int | None = None) -> Iterator[dict]:
        """Blocking `_iter_cat_objects`; `infos` may be a blocking stream (consumed on the caller's thread).

        Closing the generator early, an error or Ctrl-C cancels the reads in flight and deletes
        their temporary objects.
        """
        from . import stream_reads

        return stream_reads.iter_cat_objects(self, infos, on_error=on_error, buffer_bytes=buffer_bytes)

    async def _cat_file(self, path, start=None, end=None, **kwargs):
        """One object or range: a plain GET when small, parallel ranged GETs pinned to one generation when large."""
        from . import compose_reads

        return await compose_reads.cat_file(self, path, start, end, **kwargs)

    # -- deletes ----------------------------------------------------------------------------

    async def _rm_file(self, path: str, **kwargs: Any) -> None:
        """Delete one object through fluxfs's HTTP layer: retried, and a 403/404 names the object."""
        bucket, key, generation = self.split_path(path)
        if not key:
            return await self._rmdir(path)
        params = {"generation": generation} if generation else None
        await http.request(self, "DELETE", self.json_url("b/{}/o/{}", bucket, key), op="delete",
                           what=f"{bucket}/{key}", params=params, ok=(200, 204))
        await self._rm_file_cache_update(path)

    async def _delete_files(self, files: list[str], batchsize: int) -> list:
        """Single deletes, 32 in flight, on every endpoint (gcsfs sends 5 at a time to emulators)."""
        from fsspec.asyn import _run_coros_in_chunks

        return await _run_coros_in_chunks([self._rm_file(f) for f in files], return_exceptions=True,
                                          batch_size=32)

    # -- local copies -----------------------------------------------------------------------

    async def _get_file(self, rpath: str, lpath: str, callback: Any = None, **kwargs: Any) -> None:
        """gcsfs's download (which removes a partial file on failure), with local I/O errors naming the file."""
        try:
            await super()._get_file(rpath, lpath, callback=callback, **kwargs)
        except OSError as exc:
            if exc.errno is None or exc.filename is not None:
                raise
            # "No space left on device" alone does not say which disk: name the destination.
            raise OSError(exc.errno, exc.strerror, lpath) from exc

    # -- writes (multipart.py) ------------------------------------------------------------

    async def _pipe_file(self, path: str, data: Any, mode: str = "overwrite", content_type: str | None = None,
                         metadata: dict | None = None, **kwargs: Any) -> dict:
        """Upload bytes through the parallel uploader (crc32c-checked); mode="create" -> FileExistsError."""
        if kwargs.get("fixed_key_metadata"):  # gcsfs-only options: let gcsfs do that upload
            return await super()._pipe_file(path, data, mode=mode, content_type=content_type or
                                            "application/octet-stream", metadata=metadata, **kwargs)
        from .multipart import write_bytes

        return await write_bytes(self, path, data, create_only=_create_only(mode),
                                 content_type=content_type, metadata=metadata)

    async def _put_file(self, lpath: str, rpath: str, mode: str = "overwrite", callback: Any = None,
                        content_type: str | None = None, metadata: dict | None = None, **kwargs: Any) -> Any:
        """Upload a local file part by part in parallel, with bounded memory."""
        if os.path.isdir(lpath):
            return None
        if kwargs.get("fixed_key_metadata"):
            return await super()._put_file(lpath, rpath, mode=mode, callback=callback, content_type=content_type,
                                           metadata=metadata, **kwargs)
        import mimetypes

        from .multipart import upload_local_file

        if content_type is None:
            content_type = mimetypes.guess_type(lpath)[0]
        return await upload_local_file(self, lpath, rpath, create_only=_create_only(mode),
                                       content_type=content_type, metadata=metadata, callback=callback)


def _create_only(mode: str) -> bool:
    if mode not in ("overwrite", "create"):
        raise ValueError(f"mode must be 'overwrite' or 'create', not {mode!r}")
    return mode == "create"

"""`FluxFileSystem`: gcsfs plus fluxfs's accelerations, registered for ``flux://`` URLs.

It subclasses ``gcsfs.core.GCSFileSystem`` (not ``gcsfs.GCSFileSystem``, whose bucket-layout
gRPC lookup stalls against any emulator). Listing, many-object reads and writes are
delegated to `listing`, `reads` and `writes`.
"""
from __future__ import annotations

import functools
import os
from typing import Any, AsyncIterator, Iterator

from fsspec.asyn import _run_coros_in_chunks, get_loop
from gcsfs.core import GCSFileSystem

from . import gcsfs_adapter, inherited, temporaries
from .cache import NodeCache, cache_of, objects as node_objects, ranges as node_ranges, reader as node_cache
from .errors import from_download
from .gcs import bridge, counters, fork, http, reach, redact, urls
from .listing import api as listing, manifest
from .options import OPTION_NAMES, FluxOptions, constructor_doc, constructor_signature, drop_unknown_options
from .reads import batched, cached, direct, handle, into, lookup, stream, ranges as ranged
from .writes import FluxWriteFile, copies, deletes, fields as write_fields, uploads, zonal_append
from .zonal import buckets, hns

redact.protect_third_party_loggers()  # urllib3 logs gcsfs's tokeninfo URL, token included


GCS_ENDPOINT = "https://storage.googleapis.com"


class FluxFileSystem(inherited.GcsfsRequests, GCSFileSystem):
    """fsspec filesystem for Google Cloud Storage with parallel listing, compose reads and multipart writes."""

    protocol = ("flux",)
    __signature__ = constructor_signature(with_self=False)  # what inspect.signature(FluxFileSystem) shows

    def __init__(self, *args: Any, **kwargs: Any):
        # fluxfs's options are FluxOptions's fields (defined there only); the rest go to gcsfs and fsspec.
        given = {name: kwargs.pop(name) for name in OPTION_NAMES if name in kwargs}
        drop_unknown_options(kwargs)  # ignored, as gcsfs does, with a warning naming each
        if kwargs.get("endpoint_url"):  # "127.0.0.1:9023" as STORAGE_EMULATOR_HOST accepts it
            kwargs["endpoint_url"] = urls.normalize_endpoint(kwargs["endpoint_url"])
        if (kwargs.get("token") is None and not args and urls.is_loopback(kwargs.get("endpoint_url"))
                and not os.environ.get("GOOGLE_APPLICATION_CREDENTIALS")):
            # A server on this machine (the embedded one, an emulator) needs no credentials unless
            # ADC names a key file, and gcsfs's default chain would probe the GCE metadata server.
            kwargs["token"] = "anon"
        if kwargs.get("token") is None and not args and not kwargs.get("endpoint_url") \
                and not os.environ.get("STORAGE_EMULATOR_HOST"):
            reach.check_resolvable(GCS_ENDPOINT)  # before gcsfs's credential lookup (~30 s offline)
        # Validated before gcsfs starts anything: a bad option fails at once, naming itself.
        self.options = FluxOptions.from_arguments(**given)
        # Requests that cannot connect fail within `connect_timeout`, naming the endpoint (gcs/reach.py).
        kwargs["session_kwargs"] = reach.with_fail_fast(kwargs.get("session_kwargs"), self.options.connect_timeout)
        # gcsfs's own requests (info, ls, ...) would otherwise wait up to aiohttp's 300 s per attempt.
        kwargs.setdefault("requests_timeout", self.options.http_timeout)
        with redact.scrubbing():  # gcsfs's raw-token expiry lookup quotes the token in its errors
            super().__init__(*args, **kwargs)
        # The narrow client every acceleration takes (options, requests, URLs, refusals, temporaries).
        self.client = gcsfs_adapter.build_client(self, self.options)
        self.client.temporaries = temporaries.TempRegistry(self.client)
        self.cache_fetcher = cached.fetcher(self.client)  # what the node-local cache reads storage through (never self)
        self._folders = hns.Folders(self.client, self._find, self._glob, self._isdir, self._parent)  # HNS folders
        self._buckets = buckets.Buckets(self.client)  # zonal and HNS bucket creation, merge refused on zonal
        self._counters = counters.Counters()  # what `stats()` reports, counted on the session
        fork.reset_in_child(self)

    # inspect.signature, help() and the CLI's check of `-o` names see every option, from FluxOptions.
    __init__.__signature__ = constructor_signature()  # type: ignore[attr-defined]
    __init__.__doc__ = constructor_doc()

    # -- plumbing shared by the accelerations ---------------------------------------------

    @classmethod
    def _strip_protocol(cls, path):
        """Paths without the protocol; gs:// and gcs:// URLs name the same objects as flux:// (every method
        takes them, as `cat_objects` always did)."""
        if isinstance(path, str) and path.startswith(("gs://", "gcs://")):
            path = "flux://" + path.split("://", 1)[1]
        return super()._strip_protocol(path)

    @property
    def loop(self):
        """fsspec's event loop; in a forked child (a DataLoader worker) a fresh one, started on first use.
        An asynchronous instance runs on its caller's loop and has none of its own (None, as in fsspec)."""
        if self._loop is None and not self.asynchronous:
            self._loop = get_loop()
        return self._loop

    def _after_fork(self) -> None:
        """A forked child (a DataLoader worker) gets its own loop, session and job id (fsspec would refuse to run)."""
        if not self.asynchronous:
            gcsfs_adapter.start_over(self)
            self.client.after_fork()

    async def _set_session(self):
        """gcsfs's session, counting requests and bytes (`stats()`) and the sends of requests that ask (deletes):
        aiohttp re-sends an idempotent request once, silently, when its kept-alive connection drops before the
        answer."""
        return http.count_sends(counters.count_on(await super()._set_session(), self._counters))

    def stats(self) -> dict[str, Any]:
        """Requests by kind, their total, and body bytes read and written by this filesystem in this process
        since it was made or `reset_stats()`; each forked DataLoader worker counts its own (`gcs/counters.py`)."""
        return self._counters.snapshot()

    def reset_stats(self) -> None:
        """Count `stats()` from zero again."""
        self._counters.reset()

    @property
    def job_id(self) -> str:
        """Id for this process's temporary objects; a forked worker gets its own."""
        return self.client.job_id

    def _open(self, path: str, mode: str = "rb", block_size: int | None = None, **kwargs: Any):
        """Reads prefetch with parallel ranged GETs; writes and appends upload parts in parallel, atomically."""
        if "r" in mode:
            cached = self._open_cached(path, mode, **kwargs)
            if cached is not None:
                return cached
            return handle.FluxReadFile(self, path, mode, block_size=block_size, **kwargs)
        if mode in ("wb", "xb"):
            return FluxWriteFile(self, path, mode, block_size=block_size, **kwargs)
        if mode == "ab":  # composed onto the object, pinned by generation; a native append on zonal over gRPC
            return zonal_append.open_append(self, path, mode, block_size=block_size, **kwargs)
        raise ValueError(f"unsupported mode {mode!r} for {path}: use 'rb', 'wb', 'xb' or 'ab'")

    # -- node-local cache (cache/): `cache_dir`, `cache_limit` ---------------------------------

    @property
    def cache(self) -> NodeCache | None:
        """The node-local cache shared by this node's processes (None unless `cache_dir` is set)."""
        return cache_of(self.options)

    def _open_cached(self, path: str, mode: str, cache: bool = True, **kwargs: Any):
        """A whole-object "rb" read from the node-local cache; None (also with `cache=False`): the usual handle."""
        if mode != "rb" or not cache or self.cache is None:
            return None
        return node_cache.open_file(self.cache_fetcher, self.cache, self._strip_protocol(path), **kwargs)

    # -- listing (listing.py, manifest.py) ------------------------------------------------

    async def _iter_objects(
        self, path: str, prefix: str = "", sort: bool = False, batch_size: int | None = None, **kwargs: Any
    ) -> AsyncIterator[list[dict]]:
        """Batches of info dicts for every object under `path` (+ raw key `prefix`), streamed by the parallel lister.

        kwargs: concurrency, page_size, include_temp, progress (see `listing.iter_objects`).
        """
        async for batch in listing.iter_objects(self.client, self._strip_protocol(path), prefix, sort, batch_size,
                                                **kwargs):
            yield batch

    def iter_objects(
        self, path: str, prefix: str = "", sort: bool = False, batch_size: int | None = None, **kwargs: Any
    ) -> Iterator[list[dict]]:
        """Sync generator over `_iter_objects`: the listing runs on fs.loop while batches are consumed.

        Closing the generator early (break, or garbage collection) cancels the listing.
        """
        return bridge.iterate(self, self._iter_objects(path, prefix, sort, batch_size, **kwargs))

    async def _find(self, path, maxdepth=None, withdirs=False, detail=False, prefix="", **kwargs):
        """gcsfs's `_find` (same names, same dircache filling) on the parallel lister."""
        if kwargs.get("inventory_report_info"):
            return await super()._find(path, maxdepth=maxdepth, withdirs=withdirs, detail=detail,
                                       prefix=prefix, **kwargs)
        files = functools.partial(listing.find, self.client)  # the parallel lister's; with HNS folders (zonal/hns.py)
        return await self._folders.find(files, path, maxdepth, withdirs, detail, prefix,
                                        kwargs.get("update_cache", True), bool(kwargs.get("versions")))

    async def _du(self, path, total=True, maxdepth=None, withdirs=False, **kwargs):
        """Sizes from one fast `_find(detail=True)` (fsspec's default asks `_info` object by object)."""
        infos = await self._find(path, maxdepth=maxdepth, withdirs=withdirs, detail=True, **kwargs)
        sizes = {name: info.get("size", 0) or 0 for name, info in infos.items()}
        return sum(sizes.values()) if total else sizes

    async def _info(self, path, generation=None, **kwargs):
        """gcsfs's `_info`; a generation named (``key#generation`` with `version_aware`, or `generation=`)
        is asked of the server: the listing cache holds live objects, and gcsfs answers FileNotFoundError
        from it for an older generation once the parent directory is cached."""
        bucket, key, path_generation = self.split_path(path)
        generation = generation or path_generation
        if not (generation and key):
            return await super()._info(path, generation=generation, **kwargs)
        resp = await http.request(self.client, "GET", self.client.json_url("b/{}/o/{}", bucket, key), op="metadata",
                                  what=f"{bucket}/{key}#{generation}", params={"generation": str(generation)})
        return self._process_object(bucket, resp.json())

    def created(self, path):
        """Creation time; a listing's info dicts (in the dircache after `find`) carry no timeCreated: ask the object."""
        info = self.info(path)
        if "ctime" in info:
            return info["ctime"]
        bucket, key, _ = self.split_path(path)
        resp = bridge.run(self, http.request, self.client, "GET", self.client.json_url("b/{}/o/{}", bucket, key),
                          op="metadata", what=f"{bucket}/{key}", params={"fields": "timeCreated"})
        return self._parse_timestamp(resp.json()["timeCreated"])

    def write_manifest(self, path: str, out: Any, sort: bool = True, progress: Any = None, **kwargs: Any) -> int:
        """Write a JSON-lines manifest of every object under `path` to `out`; returns the object count.

        `out`: a local path, a file object (text or binary), or a URL (flux://, gs://, file://...).
        """
        return manifest.write_manifest(self, path, out, sort=sort, progress=progress, **kwargs)

    # -- batched reads (reads/) -----------------------------------------------------------

    async def _cat(self, path, recursive=False, on_error="raise", batch_size=None, **kwargs):
        """Many paths in one batch: small objects through temporary composites, big ones by parallel ranges.

        Metadata (size, generation, crc32c) comes from the listing cache (after find/ls) or
        from range listings; the bytes returned are always the objects' current ones.
        """
        if kwargs:  # per-path ranges or options: fsspec's per-file route
            return await super()._cat(path, recursive=recursive, on_error=on_error, batch_size=batch_size, **kwargs)
        paths = await self._expand_path(path, recursive=recursive)
        if len(paths) == 1 and not isinstance(path, list) and paths[0] == self._strip_protocol(path):
            try:
                return await self._cat_file(paths[0])
            except Exception as exc:  # fsspec returns the exception unless on_error="raise"
                if on_error == "raise":
                    raise
                return exc
        return await lookup.cat_paths(self.client, paths, on_error=on_error, skip_dirs=recursive)

    @property
    def batch_read_concurrency(self) -> int:
        """Requests a batched read keeps in flight: the `read_concurrency` option or its measured default."""
        return self.options.read_concurrency

    async def _cat_objects(self, infos, on_error: str = "raise") -> dict:
        """Read objects whose listing info is known (name "bucket/key", size, generation, crc32c): no metadata
        requests; the info's generation is read (`ObjectChanged` once gone), through the node-local cache when
        `cache_dir` is set (`cache/objects.py`)."""
        if self.cache is not None:
            return await node_objects.cat_objects(self.cache_fetcher, self.cache, list(infos), on_error)
        return await batched.cat_objects(self.client, infos, on_error=on_error, pin=True)

    def cat_objects(self, infos, on_error: str = "raise") -> dict:
        """Blocking `_cat_objects` -> {"bucket/key": bytes | exception}; Ctrl-C cleans up before re-raising."""
        return bridge.run(self, self._cat_objects, list(infos), on_error=on_error)

    async def _iter_cat_objects(self, infos, on_error: str = "raise",
                                buffer_bytes: int | None = None) -> AsyncIterator[dict]:
        """Read a stream of objects within a memory budget: {"bucket/key": bytes | exception} dicts,
        one per slice, in input order, with about `buffer_bytes` (default 256 MiB) read ahead."""
        async for batch in stream.aiter_cat_objects(self.client, infos, on_error=on_error, buffer_bytes=buffer_bytes,
                                                   read=self._cat_objects):
            yield batch

    def iter_cat_objects(self, infos, on_error: str = "raise", buffer_bytes: int | None = None) -> Iterator[dict]:
        """Blocking `_iter_cat_objects`; `infos` may be a blocking stream (consumed on the caller's thread).
        Closing the generator early, an error or Ctrl-C cancels the reads in flight and deletes
        their temporary objects.
        """
        return stream.iter_cat_objects(self.client, infos, on_error=on_error, buffer_bytes=buffer_bytes,
                                       read=self._cat_objects)

    async def _cat_file(self, path, start=None, end=None, **kwargs):
        """One object or range: a plain GET when small, parallel ranged GETs pinned to one generation when large;
        a whole object through the node-local cache when `cache_dir` is set (`cache=False`: not)."""
        if kwargs.pop("cache", True) and start is None and end is None and self.cache is not None:
            return await node_cache.cat_file(self.cache_fetcher, self.cache, path, **kwargs)
        return await direct.cat_file(self.client, path, start, end, **kwargs)

    async def _read_into(self, path: str, segments, **kwargs: Any) -> "into.IntoResult":
        """Read byte ranges of one object into writable buffers, `segments` = [(offset, buffer)]: each received
        chunk is copied once, straight into its buffer (kwargs: generation, prefix, range_size, concurrency, limit)."""
        bucket, key, gen = self.split_path(path)
        kwargs.setdefault("generation", gen or None)
        return await into.read_into(self.client, bucket, key, segments, **kwargs)

    read_into = bridge.sync_method(_read_into)

    async def _read_ranges(self, path: str, ranges, **kwargs: Any) -> Any:
        """The bytes of each (start, end) range of one object, pinned to one generation (`reads/ranges.py`);
        through the node-local cache when `cache_dir` is set (`cache/ranges.py`; `cache=False`: not)."""
        if kwargs.pop("cache", True) and self.cache is not None:
            got = await node_ranges.through_cache(self.cache_fetcher, self.cache, path, ranges, kwargs, ranged.Ranges, into.IntoResult)  # noqa: E501 - core.py is at its line limit
            if got is not None:
                return got
        return await ranged.read_ranges(self.client, path, ranges, **kwargs)

    read_ranges = bridge.sync_method(_read_ranges)

    # -- deletes ----------------------------------------------------------------------------

    async def _rm_file(self, path: str, **kwargs: Any) -> None:
        """Delete one object through fluxfs's HTTP layer: retried, a 403/404 names the object, and a 404 to a
        DELETE sent before (its answer lost) is success (`writes/deletes.py`)."""
        bucket, key, generation = self.split_path(path)
        if not key:
            return await self._rmdir(path)
        await deletes.delete_object(self.client, bucket, key, generation)
        await self._rm_file_cache_update(path)

    async def _delete_files(self, files: list[str], batchsize: int) -> list:
        """Single deletes, 32 in flight, on every endpoint (gcsfs sends 5 at a time to emulators)."""
        return await _run_coros_in_chunks([self._rm_file(f) for f in files], return_exceptions=True,
                                          batch_size=32)

    # -- gcsfs's, through composed helpers: HNS folders (zonal/hns.py), buckets (zonal/buckets.py), copies ---

    async def _mkdir(self, path, create_parents=False, **kwargs):
        made = functools.partial(self._buckets.mkdir, super()._mkdir, self.default_location)
        return await self._folders.mkdir(made, path, create_parents=create_parents, **kwargs)
    async def _makedirs(self, path, exist_ok=False):
        return await self._folders.makedirs(path, exist_ok=exist_ok)
    async def _rmdir(self, path):
        return await self._folders.rmdir(functools.partial(self._buckets.rmdir, super()._rmdir), path)
    async def _merge(self, path, paths, acl=None):
        return await self._buckets.merge(super()._merge, path, paths, acl=acl)
    async def _mv(self, path1, path2, recursive=False, maxdepth=None, **kwargs):
        return await self._folders.mv(super()._mv, path1, path2, recursive=recursive, maxdepth=maxdepth, **kwargs)
    async def _rm(self, path, recursive=False, maxdepth=None, batchsize=100):
        return await self._folders.rm(super()._rm, path, recursive=recursive, maxdepth=maxdepth, batchsize=batchsize)
    async def _list_objects(self, path, prefix="", versions=False, **kwargs):
        return await self._folders.list_objects(super()._list_objects, path, prefix=prefix, versions=versions, **kwargs)
    async def _get_directory_info(self, path, bucket, key, generation):
        return await self._folders.directory_info(super()._get_directory_info, path, bucket, key, generation)
    async def _do_list_objects(self, path, max_results=None, delimiter="/", prefix="", versions=False, **kwargs):
        return await self._folders.do_list_objects(super()._do_list_objects, path, max_results=max_results,
                                                   delimiter=delimiter, prefix=prefix, versions=versions, **kwargs)
    async def _cp_file(self, path1, path2, acl=None, **kwargs):
        return await copies.cp_file(self.client, super()._cp_file, self._cat_file, path1, path2, acl=acl, **kwargs)

    # -- local copies -----------------------------------------------------------------------

    async def _get_file(self, rpath: str, lpath: str, callback: Any = None, **kwargs: Any) -> None:
        """gcsfs's download (which removes a partial file on failure), with local I/O errors naming the file."""
        try:
            await super()._get_file(rpath, lpath, callback=callback, **kwargs)
        except Exception as exc:
            mapped = from_download(exc, self._strip_protocol(rpath), lpath)  # local I/O names the file
            if mapped is None:
                raise
            raise mapped from exc

    # -- writes (writes/) -----------------------------------------------------------------

    async def _pipe_file(self, path: str, data: Any, mode: str = "overwrite", content_type: str | None = None,
                         metadata: dict | None = None, fixed_key_metadata: dict | None = None,
                         kms_key_name: str | None = None, **kwargs: Any) -> dict:
        """Upload bytes through the parallel uploader (crc32c-checked); mode="create" -> FileExistsError.

        gcsfs's options (content_type, guessed from the key when absent; metadata; fixed_key_metadata;
        kms_key_name) are stored on every strategy; `consistency`/`chunksize` are not needed (crc32c always).
        """
        fields = write_fields.object_fields(self.split_path(path)[1], content_type, metadata, fixed_key_metadata,
                                            kms_key_name)
        _refuse_unknown("pipe_file", path, kwargs)
        return await uploads.write_bytes(self.client, path, data, create_only=_create_only(mode), fields=fields)

    async def _put_file(self, lpath: str, rpath: str, mode: str = "overwrite", callback: Any = None,
                        content_type: str | None = None, metadata: dict | None = None,
                        fixed_key_metadata: dict | None = None, kms_key_name: str | None = None,
                        **kwargs: Any) -> Any:
        """Upload a local file part by part in parallel, with bounded memory; the content type is guessed
        from the local file's name when not given (as gcsfs does)."""
        if os.path.isdir(lpath):
            return None
        fields = write_fields.object_fields(self.split_path(rpath)[1], content_type, metadata, fixed_key_metadata,
                                            kms_key_name, guess_from=lpath)
        _refuse_unknown("put_file", rpath, kwargs)
        return await uploads.upload_local_file(self.client, lpath, rpath, create_only=_create_only(mode),
                                               fields=fields, callback=callback)


# Every blocking twin of an async method runs through the one bridge (Ctrl-C cancels and cleans up),
# fsspec's generated ones (pipe_file, info, rm, ...) and gcsfs's `sync_wrapper`s included.
bridge.route_sync_methods(FluxFileSystem)

# gcsfs keywords of uploads that change nothing here: every fluxfs write is checked by crc32c, in parts it chooses.
_UPLOAD_IGNORED = frozenset({"consistency", "chunksize", "timeout"})


def _refuse_unknown(call: str, path: str, kwargs: dict) -> None:
    unknown = sorted(set(kwargs) - _UPLOAD_IGNORED)
    if unknown:
        raise TypeError(f"{call}({path}): unexpected arguments {unknown}")


def _create_only(mode: str) -> bool:
    if mode not in ("overwrite", "create"):
        raise ValueError(f"mode must be 'overwrite' or 'create', not {mode!r}")
    return mode == "create"

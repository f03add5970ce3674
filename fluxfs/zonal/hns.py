"""Hierarchical-namespace buckets as gcsfs's ExtendedGcsFileSystem handles them, over the JSON API: `mkdir` of a
path below the bucket makes a folder, `rmdir` deletes an empty one, `mv` of a folder is one atomic rename, and
`ls`/`info`/`find(withdirs=True)` show empty folders. `Folders` is composed into `FluxFileSystem`, whose methods
hand it gcsfs's own version (`base`): on a flat bucket that runs, after one cached layout lookup (`layout.py`)."""
from __future__ import annotations

import asyncio
import errno
from typing import TYPE_CHECKING, Any, Awaitable, Callable

from fsspec.asyn import has_magic
from fsspec.implementations.local import trailing_sep
from fsspec.utils import other_paths

from ..errors import HttpError
from ..gcs.redact import get_logger
from . import folders
from .layout import layout

if TYPE_CHECKING:  # pragma: no cover
    from ..gcs.client import Client

logger = get_logger(__name__)

Base = Callable[..., Awaitable[Any]]  # gcsfs's version of the method called, for what is not an HNS folder


class Folders:
    """`mkdir`, `makedirs`, `rmdir`, `mv`, `rm`, `list_objects`, `directory_info`, `do_list_objects` and `find`
    aware of HNS folders, on the client and the few filesystem calls they need (never the filesystem)."""

    def __init__(self, client: "Client", find: Base, glob: Base, isdir: Base, parent: Callable[[str], str]):
        self.client = client
        self._find, self._glob, self._isdir, self._parent = find, glob, isdir, parent

    def _split(self, path: str) -> tuple[str, str, Any]:
        return self.client.split_path(path)

    def _strip(self, path: str) -> str:
        return self.client.strip_protocol(path)

    async def is_hns(self, bucket: str) -> bool:
        return bool(bucket) and (await layout(self.client, bucket)).hns

    async def mkdir(self, base: Base, path: str, create_parents: bool = False, **kwargs: Any) -> Any:
        """On an HNS bucket, a path below the bucket becomes a folder (its parents too with `create_parents`,
        else a missing parent is FileNotFoundError); a file there is FileExistsError. Otherwise gcsfs's."""
        path = self._strip(path)
        bucket, key, _ = self._split(path)
        if key and not _makes_bucket(kwargs) and await self.is_hns(bucket):
            return await self._make_folder(path, bucket, key, create_parents, exist_ok=True)
        return await base(path, create_parents=create_parents, **kwargs)

    async def makedirs(self, path: str, exist_ok: bool = False) -> None:
        """On an HNS bucket, the folder and its parents (FileExistsError if it exists, unless `exist_ok`);
        elsewhere nothing, as gcsfs (GCS has no directories)."""
        path = self._strip(path)
        bucket, key, _ = self._split(path)
        if key and await self.is_hns(bucket):
            await self._make_folder(path, bucket, key, True, exist_ok=exist_ok)

    async def _make_folder(self, path: str, bucket: str, key: str, recursive: bool, exist_ok: bool) -> None:
        try:
            info = await self.client.info(path)
        except FileNotFoundError:
            info = None
        if info is not None:
            if info["type"] != "directory":
                raise FileExistsError(f"mkdir {path}: a file already exists there")
            if not exist_ok:
                raise FileExistsError(f"mkdir {path}: the directory already exists")
            return
        try:
            res = await folders.create(self.client, bucket, key, recursive)
        except FileNotFoundError as exc:
            raise FileNotFoundError(f"mkdir {path}: the parent folder does not exist "
                                    f"(create_parents=True makes it): {exc}") from None
        except FileExistsError:
            if not exist_ok:
                raise
            return
        self._cache_upsert(folders.directory_entry(bucket, key, res))

    async def rmdir(self, base: Base, path: str) -> None:
        """On an HNS bucket, delete the empty folder `path` (not empty: OSError ENOTEMPTY naming it; missing:
        FileNotFoundError); a bucket, or a path on a flat bucket, as gcsfs (a path there: nothing)."""
        path = self._strip(path).rstrip("/")
        bucket, key, _ = self._split(path)
        if not key or not await self.is_hns(bucket):
            return await base(path)
        try:
            await folders.delete(self.client, bucket, key)
        except FileNotFoundError as exc:
            raise FileNotFoundError(f"rmdir {path}: no such folder ({exc})") from None
        self._cache_drop(path)

    async def mv(self, base: Base, path1: Any, path2: Any, recursive: bool = False, maxdepth: Any = None,
                 **kwargs: Any) -> Any:
        """A folder of an HNS bucket moved within it: one atomic rename (gcsfs's RenameFolder), its
        long-running operation waited for; moved elsewhere (recursive): `_mv_tree`; anything else as gcsfs
        (copies and deletes)."""
        if isinstance(path1, str) and isinstance(path2, str) and has_magic(path1) and recursive and maxdepth is None:
            if await self.is_hns(self._split(self._strip(path1))[0]):
                return await self._mv_tree(base, path1, path2, **kwargs)
        if isinstance(path1, str) and isinstance(path2, str) and not has_magic(path1) and path1 != path2:
            p1, p2 = self._strip(path1).rstrip("/"), self._strip(path2).rstrip("/")
            bucket1, key1, _ = self._split(p1)
            bucket2, key2, _ = self._split(p2)
            if key1 and (bucket1 == bucket2 or recursive and maxdepth is None) and await self.is_hns(bucket1):
                info = await self.client.info(p1)
                if info.get("type") == "directory" and bucket1 != bucket2:
                    return await self._mv_tree(base, path1, path2, **kwargs)
                if info.get("type") == "directory":
                    dst = key2 or key1.rsplit("/", 1)[-1]
                    try:
                        await folders.rename(self.client, bucket1, key1, dst)
                    finally:  # even a rename that failed or timed out may have happened
                        self._cache_drop(p1)  # the old folder and everything below it
                        self._cache_drop(f"{bucket1}/{dst}")
                    self._cache_upsert(folders.directory_entry(bucket1, dst))
                    return None
        return await base(path1, path2, recursive=recursive, maxdepth=maxdepth, **kwargs)

    async def _mv_tree(self, base: Base, path1: str, path2: str, **kwargs: Any) -> None:
        """A directory of an HNS bucket moved to another bucket, or a glob's matches moved (recursive): the
        objects moved as gcsfs moves them (`base`: copy, then delete), to the paths gcsfs gives them (an empty
        folder would fail gcsfs's move), the empty folders made there when that bucket has folders, then the
        moved directories' folders deleted, deepest first: nothing is left behind (gcsfs leaves the folders)."""
        p1 = self._strip(path1).rstrip("/")
        dest = self._strip(path2)
        if has_magic(p1):
            found = dict(await self._glob(p1, detail=True))
            roots = [m for m, info in found.items() if info.get("type") == "directory"]
            for m in roots:
                found.update(await self._find(m, withdirs=True, detail=True))
            exists = len(found) == 1  # as gcsfs's mv: one file matched goes into path2
        else:
            found = await self._find(p1, withdirs=True, detail=True)
            found.setdefault(p1, {"type": "directory"})
            roots = [p1]
            exists = not trailing_sep(path1) and (trailing_sep(path2) or await self._isdir(dest))
        if not found:
            raise FileNotFoundError(path1)
        paths1 = sorted(found)
        paths2 = other_paths(paths1, dest, exists=exists)
        files = [(a, b) for a, b in zip(paths1, paths2) if found[a].get("type") != "directory"]
        if files:
            await base([a for a, _ in files], [b for _, b in files], **kwargs)
        empty = [b for a, b in zip(paths1, paths2)
                 if found[a].get("type") == "directory" and not any(p.startswith(a + "/") for p in paths1)]
        for b in empty:
            bucket, key, _ = self._split(b)
            if key and await self.is_hns(bucket):
                await self._make_folder(b, bucket, key, True, exist_ok=True)
        for root in roots:
            bucket, key, _ = self._split(root)
            await self._delete_folders(root, bucket, key, keep_filled=True)
        self.client.invalidate_cache(dest)

    async def _delete_folders(self, path: str, bucket: str, key: str, keep_filled: bool = False) -> int:
        """Delete the folder `key` and every folder below it, deepest first; how many were deleted. A folder
        that is gone is skipped; one still holding something is kept with `keep_filled`, else OSError."""
        removed = 0
        below = await folders.list_all(self.client, bucket, folders.folder_id(key))
        for res in sorted(below, key=lambda r: (-r["name"].count("/"), r["name"])):
            try:
                await folders.delete(self.client, bucket, res["name"])
                removed += 1
            except FileNotFoundError:
                pass
            except OSError as exc:
                if not (keep_filled and exc.errno == errno.ENOTEMPTY):
                    raise
        self._cache_drop(path)
        return removed

    async def rm(self, base: Base, path: Any, recursive: bool = False, maxdepth: Any = None,
                 batchsize: int = 100) -> Any:
        """gcsfs's, then on an HNS bucket the folders, as gcsfs's ExtendedGcsFileSystem deletes them: a recursive
        rm of a directory, or of a glob's directories, deletes its folders too, deepest first (otherwise the
        emptied folders would still be listed); an rm of a folder alone deletes it when empty (a non-empty one:
        OSError ENOTEMPTY naming it, nothing deleted)."""
        dirs, alone = [], []
        missing: FileNotFoundError | None = None
        for p in [path] if isinstance(path, str) else list(path):
            p = self._strip(p).rstrip("/")
            bucket, key, _ = self._split(p)
            if not key or has_magic(p) and not recursive:
                continue
            if not recursive:
                alone.append((p, bucket, key))  # its layout asked only if gcsfs's rm finds nothing
            elif maxdepth is not None or not await self.is_hns(bucket):
                continue
            elif has_magic(p):
                matched = await self._glob(p, detail=True)
                dirs += [(m, bucket, self._split(m)[1]) for m, info in matched.items()
                         if info.get("type") == "directory"]
            else:
                dirs.append((p, bucket, key))
        try:
            out = await base(path, recursive=recursive, maxdepth=maxdepth, batchsize=batchsize)
        except FileNotFoundError as exc:
            if not dirs and not alone:
                raise
            out, missing = [], exc
        removed = 0
        for p, bucket, key in dirs:
            removed += await self._delete_folders(p, bucket, key)
        if not out and not removed:  # nothing deleted: the paths named alone may be folders
            for p, bucket, key in alone:
                if not await self.is_hns(bucket):
                    continue
                try:
                    await folders.delete(self.client, bucket, key)
                except FileNotFoundError:
                    continue
                removed += 1
                self._cache_drop(p)
        if not out and not removed:
            raise missing or FileNotFoundError(path)
        return out

    async def list_objects(self, base: Base, path: str, prefix: str = "", versions: bool = False,
                           **kwargs: Any) -> Any:
        """gcsfs's; an empty folder of an HNS bucket lists as empty rather than FileNotFoundError."""
        try:
            return await base(path, prefix=prefix, versions=versions, **kwargs)
        except FileNotFoundError:
            bucket, key, _ = self._split(path)
            if key and not prefix and await self.is_hns(bucket):
                try:
                    await folders.get(self.client, bucket, key)
                    return []
                except FileNotFoundError:
                    pass
            raise

    async def directory_info(self, base: Base, path: str, bucket: str, key: str, generation: Any) -> dict:
        """On an HNS bucket, a folder (empty ones included) is a directory; otherwise gcsfs's listing check."""
        if await self.is_hns(bucket):
            try:
                res = await folders.get(self.client, bucket, key)
            except FileNotFoundError:
                pass  # objects named below it without a folder resource: gcsfs's check decides
            else:
                return folders.directory_entry(bucket, key, res)
        return await base(path, bucket, key, generation)

    async def do_list_objects(self, base: Base, path: str, max_results: Any = None, delimiter: str = "/",
                              prefix: str = "", versions: bool = False, **kwargs: Any) -> Any:
        """gcsfs's listing; on an HNS bucket with delimiter "/", empty folders come as prefixes too
        (`includeFoldersAsPrefixes`, as gcsfs asks)."""
        if delimiter == "/" and await self.is_hns(self._split(path)[0]):
            kwargs["includeFoldersAsPrefixes"] = "true"
        return await base(path, max_results=max_results, delimiter=delimiter, prefix=prefix, versions=versions,
                          **kwargs)

    def _cache_drop(self, path: str) -> None:
        """Forget `path` and everything below it in the dircache, and its entry in its parent's listing."""
        dircache = self.client.dircache
        for cached in [k for k in dircache if k == path or k.startswith(path + "/")]:
            dircache.pop(cached, None)
        parent = self._parent(path)
        if parent in dircache:
            dircache[parent] = [e for e in dircache[parent] if e.get("name") != path]

    def _cache_upsert(self, entry: dict) -> None:
        """`entry` in its parent's cached listing (replacing one of the same name), when that listing is cached."""
        dircache, parent = self.client.dircache, self._parent(entry["name"])
        if parent in dircache:
            dircache[parent] = [e for e in dircache[parent] if e.get("name") != entry["name"]] + [entry]

    async def find(self, list_files: Base, path: str, maxdepth: Any = None, withdirs: bool = False,
                   detail: bool = False, prefix: str = "", update_cache: bool = True, versions: bool = False) -> Any:
        """`list_files` (the parallel lister's find); on an HNS bucket with every folder added as a directory,
        empty ones included, listed alongside (folders.list) as gcsfs lists them."""
        if not await self.is_hns(self._split(path)[0]):
            return await list_files(path, maxdepth=maxdepth, withdirs=withdirs, detail=detail, prefix=prefix,
                                    update_cache=update_cache, versions=versions)
        path = self._strip(path)
        if maxdepth is not None and maxdepth < 1:
            raise ValueError("maxdepth must be at least 1")
        found, listed = await asyncio.gather(
            list_files(path, withdirs=True, detail=True, prefix=prefix, update_cache=update_cache, versions=versions),
            self._list_folders(path, prefix))
        objects = list(found.values()) + self._missing_folders(path, listed, found, prefix,
                                                               update_cache and not versions)
        if not withdirs:
            objects = [o for o in objects if o.get("type") != "directory"]
        objects.sort(key=lambda o: o["name"])
        if maxdepth:
            depth = path.rstrip("/").count("/") + maxdepth
            objects = [o for o in objects if o["name"].count("/") <= depth]
        named = [((f"{o['name']}#{o['generation']}" if versions and o.get("type") == "file" else o["name"]), o)
                 for o in objects]
        return dict(named) if detail else [n for n, _ in named]

    async def _list_folders(self, path: str, prefix: str) -> list[dict]:
        bucket, key, _ = self._split(path.rstrip("/"))
        start = (key + "/" if key else "") + prefix
        try:
            return await folders.list_all(self.client, bucket, start)
        except HttpError as exc:
            if exc.status != 400:
                raise
            # Declared HNS (`bucket_types`) but the server says it is not: the files are all there anyway.
            logger.warning("find %s: bucket %s has no folders (%s); listing its objects only", path, bucket,
                           exc.message)
            return []

    def _missing_folders(self, path: str, listed: list[dict], found: dict, prefix: str,
                         update_cache: bool) -> list[dict]:
        """The folders of `listed` that `found` (a find's entries by name) lacks, as directory entries; each also
        put in its parent's cached listing (and its own, if none)."""
        path = path.rstrip("/")
        bucket = self._split(path)[0]
        extra = []
        for res in listed:
            entry = folders.directory_entry(bucket, res["name"], res)
            name = entry["name"]
            if name in found:
                continue
            extra.append(entry)
            if update_cache and not prefix:
                self.client.dircache.setdefault(name, [])
                self._cache_upsert(entry)
        return extra


def _makes_bucket(kwargs: dict) -> bool:
    return kwargs.get("placement") is not None or bool(kwargs.get("enable_hierarchical_namespace"))

"""HNS folders in the store: made by folders.insert or implied by an object's name (as GCS does), deleted
only when empty, renamed with every folder and object below them in one synchronous step (nothing else
runs on the server's loop meanwhile, so no request sees half a rename). Persisted under ``--root``."""
from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Dict, List

from .buckets import Bucket, validate_object_name
from .diskerr import disk_writes
from .errors import ServerError

if TYPE_CHECKING:  # pragma: no cover
    from .store import Store

NOT_HNS = "The bucket does not have hierarchical namespace enabled: {}"


def hns_bucket(store: "Store", bucket: str) -> Bucket:
    """The bucket, which must have a hierarchical namespace (400 otherwise, as GCS answers)."""
    b = store.bucket(bucket)
    if not b.hns:
        raise ServerError(400, NOT_HNS.format(bucket), "invalid")
    return b


def folder_name(name: Any) -> str:
    """A folder name as GCS keeps it ("a/b/"): a trailing slash added; 400 for an empty or invalid one."""
    if not isinstance(name, str) or not name.strip("/"):
        raise ServerError(400, f"Invalid folder name: {name!r}", "invalid")
    name = name if name.endswith("/") else name + "/"
    validate_object_name(name)
    if name.startswith("/") or "//" in name:
        raise ServerError(400, f"Invalid folder name: {name!r}", "invalid")
    return name


def parents(name: str) -> List[str]:
    """The folders above `name` ("a/b/c" or "a/b/c/" -> ["a/", "a/b/"])."""
    parts = name.rstrip("/").split("/")[:-1]
    return ["/".join(parts[:i + 1]) + "/" for i in range(len(parts))]


def _record() -> Dict[str, Any]:
    now = time.time()
    return {"created": now, "updated": now, "metageneration": 1}


def _save(store: "Store", b: Bucket) -> None:
    if store.persist:
        with disk_writes(f"the folders of bucket {b.name}"):
            store.persist.save_folders(b)


def imply_folders(store: "Store", b: Bucket, name: str) -> None:
    """Make the folders that object (or folder) `name` lies in, if missing."""
    missing = [p for p in parents(name) if p not in b.folders]
    if missing:
        for p in missing:
            b.folders[p] = _record()
        _save(store, b)


def create(store: "Store", bucket: str, name: str, recursive: bool) -> Dict[str, Any]:
    """folders.insert: 409 if it exists; 404 naming a missing parent unless `recursive`."""
    b = hns_bucket(store, bucket)
    name = folder_name(name)
    if name in b.folders:
        raise ServerError(409, f"The folder you tried to create already exists: {bucket}/{name}", "conflict")
    missing = [p for p in parents(name) if p not in b.folders]
    if missing and not recursive:
        raise ServerError(404, f"The parent folder {missing[-1]} of {bucket}/{name} does not exist "
                               "(recursive=true creates it).", "notFound")
    for p in missing + [name]:
        b.folders[p] = _record()
    _save(store, b)
    return b.folders[name]


def get(store: "Store", bucket: str, name: str) -> Dict[str, Any]:
    """folders.get: the folder's record; 404 naming it."""
    b = hns_bucket(store, bucket)
    name = folder_name(name)
    if name not in b.folders:
        raise ServerError(404, f"The folder does not exist: {bucket}/{name}", "notFound")
    return b.folders[name]


def delete(store: "Store", bucket: str, name: str) -> None:
    """folders.delete: only an empty folder (no objects, no folders below); 409 naming it otherwise."""
    b = hns_bucket(store, bucket)
    get(store, bucket, name)
    name = folder_name(name)
    if _first_below(b.objects, name) is not None or _first_below(b.folders, name, skip=name) is not None:
        raise ServerError(409, f"The folder you tried to delete is not empty: {bucket}/{name}", "conflict")
    del b.folders[name]
    _save(store, b)


def rename(store: "Store", bucket: str, src: str, dst: str, move_object) -> Dict[str, Any]:
    """Folder `src` becomes `dst`, with every folder and object below it (`move_object(old, new)` moves one)."""
    b = hns_bucket(store, bucket)
    get(store, bucket, src)
    src, dst = folder_name(src), folder_name(dst)
    if dst in b.folders:
        raise ServerError(409, f"The destination folder already exists: {bucket}/{dst}", "conflict")
    if dst.startswith(src):
        raise ServerError(400, f"Cannot rename folder {bucket}/{src} into itself ({dst}).", "invalid")
    names = list(b.objects.irange(minimum=src, maximum=src[:-1] + "0", inclusive=(True, False)))
    folders = list(b.folders.irange(minimum=src, maximum=src[:-1] + "0", inclusive=(True, False)))
    for old in names:
        move_object(old, dst + old[len(src):])
    for old in folders:
        rec = b.folders.pop(old)
        rec = {**rec, "updated": time.time(), "metageneration": rec["metageneration"] + 1}
        b.folders[dst + old[len(src):]] = rec
    imply_folders(store, b, dst)
    _save(store, b)
    return b.folders[dst]


def _first_below(index, name: str, skip: str = ""):
    for key in index.irange(minimum=name, maximum=name[:-1] + "0", inclusive=(True, False)):
        if key != skip:
            return key
    return None


def prefixes_under(b: Bucket, prefix: str) -> List[str]:
    """The folders just below `prefix` ("a/" -> "a/x/", not "a/x/y/"), for includeFoldersAsPrefixes."""
    hi = prefix[:-1] + "0" if prefix.endswith("/") else None
    return [f for f in b.folders.irange(minimum=prefix, maximum=hi, inclusive=(True, False))
            if f.startswith(prefix) and f != prefix and "/" not in f[len(prefix):-1]]


def folder_prefixes(b: Bucket, prefix: str, prefixes: List[str]) -> List[str]:
    """An objects.list page's `prefixes` with the folders just below `prefix` added (includeFoldersAsPrefixes;
    only on an HNS bucket, on the listing's last page, so each comes once)."""
    if not b.hns:
        return prefixes
    return sorted(set(prefixes).union(prefixes_under(b, prefix)))

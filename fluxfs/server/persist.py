"""Disk persistence for the server's store (``--root DIR``): survives a restart.

Layout under ROOT/buckets/BUCKET/: ``bucket.json``; ``objects/H.json`` (one metadata file per
object name, H = sha256 of the name; a tombstone after a delete); ``data/H-GEN`` (the body);
``synthetic/GEN.json`` (one record per ``generate`` call, so 1M synthetic objects cost one file);
``versions/H-GEN.json`` (a noncurrent generation of a versioned bucket; its body stays ``data/H-GEN``);
``folders.json`` (an HNS bucket's folders).
Files are written to a temporary name, fsynced, then renamed (the directory fsynced too), so a
crash leaves the old or the new version, never a torn one, and an acknowledged write is on disk.
An unfinalized appendable (zonal) object's body file grows in place instead (grpc/appendable.py): each flush
fsyncs the appended bytes, then its metadata's size; bytes past that size are a stream's unflushed ones.
On load, synthetic batches are expanded first, then per-object files (which are newer:
``generate`` removes the per-object files of the names it overwrites). In-progress uploads are
kept under ROOT/uploads/ (pending.py).
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from typing import Dict, Optional, Set, Tuple

from .buckets import Bucket
from .objects import Obj, SynthBatch
from .spool import unlink_quietly


_SUBDIRS = ("objects", "data", "synthetic", "versions")


def _h(name: str) -> str:
    return hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()[:40]


def fsync_dir(path: str) -> None:
    """Make the directory's entries (a rename, a new or removed file) durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(path: str, data: bytes) -> None:
    """Write ``path`` whole or not at all, and durably: the server acknowledges a write only after
    its file and the directory entry naming it are on disk (fsync), so a crash loses nothing answered."""
    d = os.path.dirname(path)
    fd, tmp = tempfile.mkstemp(dir=d, prefix=".tmp-")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    fsync_dir(d)


class Persistence:
    """Writes every change of a Store under ``root`` (atomically) and reads it all back on start."""

    def __init__(self, root: str):
        self.root = os.path.abspath(root)
        os.makedirs(os.path.join(self.root, "buckets"), exist_ok=True)
        # Names that have a per-object file (live or tombstone), per bucket.
        self.files: Dict[str, Set[str]] = {}

    def _bdir(self, bucket: str, *sub: str) -> str:
        return os.path.join(self.root, "buckets", bucket, *sub)

    def data_dir(self, bucket: str) -> str:
        """The directory of the bucket's bodies (uploads are received into temporary files there)."""
        return self._bdir(bucket, "data")

    # -- buckets --
    def save_bucket(self, b: Bucket) -> None:
        for sub in _SUBDIRS:
            os.makedirs(self._bdir(b.name, sub), exist_ok=True)
        atomic_write(self._bdir(b.name, "bucket.json"),
                     json.dumps({"name": b.name, "created": b.created, "labels": b.labels,
                                 "versioning": b.versioning, "layout": b.layout}).encode())
        self.files.setdefault(b.name, set())

    def save_folders(self, b: Bucket) -> None:
        """The bucket's HNS folders (name -> record), in one file rewritten atomically."""
        atomic_write(self._bdir(b.name, "folders.json"), json.dumps(dict(b.folders)).encode())

    def delete_bucket(self, name: str) -> None:
        shutil.rmtree(self._bdir(name), ignore_errors=True)
        self.files.pop(name, None)

    # -- objects --
    def _meta(self, obj: Obj) -> Dict:
        return {"name": obj.name, "size": obj.size, "generation": obj.generation,
                "metageneration": obj.metageneration, "content_type": obj.content_type,
                "metadata": obj.metadata, "created": obj.created, "updated": obj.updated,
                "component_count": obj.component_count, "md5": obj._md5, "crc": obj._crc,
                "extra": obj.extra, "seed": obj.seed,
                "data": os.path.basename(obj.path) if obj.path else None}

    def save_object(self, bucket: str, obj: Obj, old: Obj = None, spooled=None) -> None:
        """Write the body (or rename the `spooled` file that holds it) then the metadata; the object then
        reads its body from disk. If the metadata cannot be written, the body goes back where it was."""
        h = _h(obj.name)
        path = self._bdir(bucket, "data", f"{h}-{obj.generation}")
        if spooled is not None:
            os.replace(spooled.path, path)
            try:
                fsync_dir(os.path.dirname(path))
            except BaseException:
                os.replace(path, spooled.path)
                raise
        else:
            atomic_write(path, obj.data)
        try:
            self.save_meta(bucket, obj, path)
        except BaseException:
            if spooled is not None:
                os.replace(path, spooled.path)
            else:
                unlink_quietly(path)
            raise
        obj.path, obj.data = path, None
        if old is not None and old.path and old.path != path:
            unlink_quietly(old.path)

    def save_meta(self, bucket: str, obj: Obj, path: Optional[str] = None) -> None:
        """The object's metadata file (`path`: its body file, when not yet ``obj.path``)."""
        meta = self._meta(obj)
        if path is not None:
            meta["data"] = os.path.basename(path)
        atomic_write(self._bdir(bucket, "objects", _h(obj.name) + ".json"), json.dumps(meta).encode())
        self.files.setdefault(bucket, set()).add(obj.name)

    def delete_object(self, bucket: str, obj: Obj, keep_data: bool = False) -> None:
        # A tombstone (not an unlink): the name may be covered by a synthetic batch. A bucket with no
        # batch needs none, and an unlink frees space: deleting still works on a full disk.
        mpath = self._bdir(bucket, "objects", _h(obj.name) + ".json")
        try:
            atomic_write(mpath, json.dumps({"name": obj.name, "deleted": True}).encode())
            self.files.setdefault(bucket, set()).add(obj.name)
        except OSError:
            if os.listdir(self._bdir(bucket, "synthetic")):
                raise
            unlink_quietly(mpath)
            fsync_dir(os.path.dirname(mpath))
            self.files.get(bucket, set()).discard(obj.name)
        if obj.path and not keep_data:  # kept: the body of a generation that stays noncurrent
            unlink_quietly(obj.path)

    def _version_path(self, bucket: str, obj: Obj) -> str:
        return self._bdir(bucket, "versions", f"{_h(obj.name)}-{obj.generation}.json")

    def save_noncurrent(self, bucket: str, obj: Obj, deleted: Optional[float] = None) -> None:
        """Record a noncurrent generation (its body file, if any, is already under data/); `deleted`:
        when it becomes noncurrent, if ``obj.deleted`` is not set yet."""
        meta = {**self._meta(obj), "time_deleted": obj.deleted if deleted is None else deleted}
        atomic_write(self._version_path(bucket, obj), json.dumps(meta).encode())

    def delete_noncurrent(self, bucket: str, obj: Obj, keep_data: bool = False) -> None:
        unlink_quietly(self._version_path(bucket, obj))
        if obj.path and not keep_data:
            unlink_quietly(obj.path)

    def save_batch(self, bucket: str, gen: int, count: int, size, prefix: str, seed: int, created: float) -> None:
        atomic_write(self._bdir(bucket, "synthetic", f"{gen}.json"),
                     json.dumps({"generation": gen, "count": count, "size": size, "prefix": prefix,
                                 "seed": seed, "created": created}).encode())
        have = self.files.get(bucket, set())
        if have:
            for i in range(count):
                nm = f"{prefix}{i:08d}"
                if nm in have:
                    self._drop_files(bucket, nm)

    def _drop_files(self, bucket: str, name: str) -> None:
        h = _h(name)
        mpath = self._bdir(bucket, "objects", h + ".json")
        try:
            with open(mpath, "rb") as f:
                meta = json.load(f)
            if meta.get("data"):
                unlink_quietly(self._bdir(bucket, "data", meta["data"]))
        except (FileNotFoundError, ValueError):
            pass
        unlink_quietly(mpath)
        self.files.get(bucket, set()).discard(name)

    # -- startup --
    def load(self) -> Tuple[Dict[str, Bucket], int]:
        """The buckets saved under the root, and the highest generation among their objects."""
        buckets: Dict[str, Bucket] = {}
        last_gen = 0
        base = os.path.join(self.root, "buckets")
        for bname in sorted(os.listdir(base)):
            try:
                with open(self._bdir(bname, "bucket.json"), "rb") as f:
                    binfo = json.load(f)
            except (FileNotFoundError, ValueError):
                continue
            b = Bucket(bname, created=binfo.get("created", 0.0), labels=binfo.get("labels"),
                       versioning=binfo.get("versioning"), layout=binfo.get("layout") or {})
            buckets[bname] = b
            try:
                with open(self._bdir(bname, "folders.json"), "rb") as f:
                    b.folders.update(json.load(f))
            except FileNotFoundError:
                pass
            names: Set[str] = set()
            self.files[bname] = names
            for sub in _SUBDIRS:
                os.makedirs(self._bdir(bname, sub), exist_ok=True)
            batches = []
            for fn in os.listdir(self._bdir(bname, "synthetic")):
                if fn.endswith(".json"):
                    with open(self._bdir(bname, "synthetic", fn), "rb") as f:
                        batches.append(json.load(f))
            new = {}
            for bt in sorted(batches, key=lambda x: x["generation"]):
                size = bt["size"] if isinstance(bt["size"], int) else tuple(bt["size"])
                batch = SynthBatch(bt["generation"], bt["created"], size, bt["seed"])
                new.update(dict.fromkeys([f"{bt['prefix']}{i:08d}" for i in range(bt["count"])], batch))
                last_gen = max(last_gen, bt["generation"])
            for fn in os.listdir(self._bdir(bname, "objects")):
                if not fn.endswith(".json"):
                    continue  # a leftover temporary file from a crash
                with open(self._bdir(bname, "objects", fn), "rb") as f:
                    m = json.load(f)
                names.add(m["name"])
                if m.get("deleted"):
                    new.pop(m["name"], None)
                    continue
                o = self._obj(bname, m)
                new[o.name] = o
                last_gen = max(last_gen, o.generation)
            b.objects.update(new)
            for fn in os.listdir(self._bdir(bname, "versions")):
                if fn.endswith(".json"):
                    with open(self._bdir(bname, "versions", fn), "rb") as f:
                        m = json.load(f)
                    o = self._obj(bname, m)
                    o.deleted = m["time_deleted"]
                    b.noncurrent.setdefault(o.name, []).append(o)
                    last_gen = max(last_gen, o.generation)
            for gens in b.noncurrent.values():
                gens.sort(key=lambda o: o.generation)
            for fn in os.listdir(self._bdir(bname, "data")):
                if fn.startswith(".tmp-"):
                    unlink_quietly(self._bdir(bname, "data", fn))
        return buckets, last_gen

    def _obj(self, bname: str, m: Dict) -> Obj:
        """An object record from its saved metadata."""
        o = Obj(m["name"], m["size"], m["generation"], content_type=m["content_type"],
                metadata=m["metadata"], created=m["created"], md5=m["md5"], crc=m["crc"],
                component_count=m["component_count"], extra=m["extra"],
                metageneration=m["metageneration"], seed=m.get("seed"),
                path=self._bdir(bname, "data", m["data"]) if m.get("data") else None)
        o.updated = m["updated"]
        if o.path is None and o.seed is None:
            o.data = b""
        return o

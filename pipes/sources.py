"""Where a dataset's objects come from (a prefix, a list of URLs, a manifest) and how a batch of them is read.

`ObjectSource` resolves the object list once, lazily, in the process that first needs it (the main
process, before DataLoader workers start), and carries it to workers as plain columns when pickled.
The filesystem is never pickled: each process builds its own from the storage options.
"""
from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator, Optional, Sequence

import fsspec

from fluxfs.listing.manifest import read_manifest

MISSING_POLICIES = ("raise", "skip")
DEFAULT_PROTOCOL = "flux"
# Batched reads kept in flight by the iterable dataset, per DataLoader worker (ReadObjects keeps
# its own NODES_PREFETCH: a Nodes pipeline reads in one process). A compose-backed read
# takes ~3 round trips, so with 2 in flight each DataLoader worker sat waiting: training bench,
# cloud profile, 4,000 images, 2 workers, batches of 64, medians of 3: 1,771 samples/s at 2,
# 2,670 at 4, 2,685 at 8 while training was the bottleneck. Once a step took half the time (the
# in-memory limit 3,535 -> ~6,600 samples/s), 4 left the workers waiting half the step: 20,000
# images, two interleaved pairs of runs: ~3,650-3,680 at 4 (50-57% waiting), ~4,680-4,710 at 8
# (21-24%). Memory: prefetch x read batch x object size (8 x 32 x 100 KB = 26 MB per worker).
DEFAULT_PREFETCH = 8
# Up to this many objects of unknown size are looked up one by one (in threads); more than that,
# and one listing of their common prefix is cheaper than a round trip per object.
_LOOKUP_INDIVIDUALLY = 256


@dataclass(frozen=True)
class ObjectMeta:
    """What a transform learns about an object besides its bytes."""

    key: str
    size: int
    label: Any = None
    bucket: str = ""
    generation: Optional[str] = None
    crc32c: Optional[str] = None
    protocol: str = DEFAULT_PROTOCOL

    @property
    def path(self) -> str:
        """``bucket/key``, as fsspec paths are spelled."""
        return f"{self.bucket}/{self.key}"

    @property
    def url(self) -> str:
        return f"{self.protocol}://{self.path}"


Transform = Callable[[bytes, ObjectMeta], Any]


def key_and_bytes(data: bytes, meta: ObjectMeta) -> tuple[str, bytes]:
    """The default transform: ``(key, data)``, which DataLoader's default collate turns into two lists."""
    return meta.key, data


class ObjectTable:
    """The resolved objects as parallel columns: cheap to pickle to spawned workers, no per-object dicts."""

    def __init__(self, names: list[str], sizes: list[int], generations: list[Optional[str]],
                 crc32cs: list[Optional[str]], labels: Optional[list[Any]] = None):
        self.names, self.sizes, self.generations, self.crc32cs = names, sizes, generations, crc32cs
        self.labels = labels

    @classmethod
    def from_infos(cls, infos: Iterable[dict], labels: Optional[dict[str, Any]] = None) -> "ObjectTable":
        """From info dicts (name "bucket/key", size, generation, crc32c), sorted by name so every process agrees."""
        rows = sorted(infos, key=lambda info: info["name"])
        names = [r["name"] for r in rows]
        return cls(
            names,
            [int(r["size"]) for r in rows],
            [_opt_str(r.get("generation")) for r in rows],
            [r.get("crc32c") for r in rows],
            [labels.get(n) for n in names] if labels else None,
        )

    def __len__(self) -> int:
        return len(self.names)

    def info(self, i: int) -> dict:
        """The info dict of object `i`, as `fs.cat_objects` takes it."""
        info = {"name": self.names[i], "size": self.sizes[i], "type": "file"}
        if self.generations[i] is not None:
            info["generation"] = self.generations[i]
        if self.crc32cs[i] is not None:
            info["crc32c"] = self.crc32cs[i]
        return info

    def meta(self, i: int, protocol: str) -> ObjectMeta:
        bucket, _, key = self.names[i].partition("/")
        label = self.labels[i] if self.labels is not None else None
        return ObjectMeta(key, self.sizes[i], label, bucket, self.generations[i], self.crc32cs[i], protocol)


def _opt_str(value: Any) -> Optional[str]:
    return None if value is None else str(value)


def split_url(url: str) -> tuple[str, str, str]:
    """``proto://bucket/key-prefix`` -> (protocol, bucket, key prefix), keeping a trailing '/' (fsspec strips it)."""
    protocol, sep, rest = url.partition("://")
    if not sep:
        protocol, rest = DEFAULT_PROTOCOL, url
    bucket, _, key = rest.partition("/")
    if not bucket:
        raise ValueError(f"no bucket in {url!r}: expected {protocol}://BUCKET/PREFIX")
    return protocol, bucket, key


class ObjectSource:
    """A prefix, URL list or manifest, resolved lazily to an `ObjectTable`, plus batched reads of its objects."""

    def __init__(self, kind: str, target: Any, *, storage_options: Optional[dict] = None,
                 base_url: Optional[str] = None, on_missing: str = "raise"):
        if on_missing not in MISSING_POLICIES:
            raise ValueError(f"on_missing must be one of {MISSING_POLICIES}, not {on_missing!r}")
        self.kind, self.target, self.base_url, self.on_missing = kind, target, base_url, on_missing
        self.storage_options = dict(storage_options or {})
        self.protocol = self._protocol()
        self._table: Optional[ObjectTable] = None
        self._fs = None
        self._fs_pid: Optional[int] = None
        self._direct_fs = None
        self._direct_fs_pid: Optional[int] = None
        self.missing: list[str] = []  # URLs skipped under on_missing="skip", in this process

    def _protocol(self) -> str:
        if self.kind == "prefix":
            return split_url(self.target)[0]
        if self.kind == "objects":
            targets = list(self.target)
            if not targets:
                raise ValueError("from_objects needs at least one URL")
            protocols = {split_url(u)[0] for u in targets}
            if len(protocols) > 1:
                raise ValueError(f"from_objects URLs mix protocols {sorted(protocols)}; use one filesystem")
            self.target = targets
            return protocols.pop()
        for hint in (self.base_url, self.target if isinstance(self.target, str) else None):
            if hint and "://" in hint and not hint.startswith("file://"):
                return hint.split("://", 1)[0]
        return DEFAULT_PROTOCOL

    def describe(self) -> str:
        if self.kind == "objects":
            return f"{len(self.target)} object URLs"
        return f"{self.kind} {self.target}"

    # -- per-process state -----------------------------------------------------------------

    @property
    def fs(self):
        """This process's filesystem, built from the storage options (a forked child builds its own)."""
        if self._fs is None or self._fs_pid != os.getpid():
            self._fs = fsspec.filesystem(self.protocol, **self.storage_options)
            self._fs_pid = os.getpid()
        return self._fs

    def __getstate__(self) -> dict:
        # Resolve before pickling, so spawned workers get the list instead of listing again.
        self.table  # noqa: B018
        state = dict(self.__dict__)
        state["_fs"] = state["_fs_pid"] = state["_direct_fs"] = state["_direct_fs_pid"] = None
        return state

    # -- resolution ------------------------------------------------------------------------

    @property
    def table(self) -> ObjectTable:
        """The object list, resolved on first use and cached."""
        if self._table is None:
            if self.kind == "prefix":
                self._table = self._resolve_prefix(self.target)
            elif self.kind == "objects":
                self._table = self._resolve_paths([_path_of(u) for u in self.target], None)
            else:
                self._table = self._resolve_manifest(self.target)
        return self._table

    def _resolve_prefix(self, url: str) -> ObjectTable:
        _, bucket, key_prefix = split_url(url)
        table = ObjectTable.from_infos(list_objects(self.fs, bucket, key_prefix))
        if not len(table):
            raise FileNotFoundError(f"no objects under {url}")
        return table

    def _resolve_paths(self, paths: list[str], labels: Optional[dict[str, Any]]) -> ObjectTable:
        found = lookup_objects(self.fs, paths)
        absent = [p for p in dict.fromkeys(paths) if p not in found]
        self._missing_objects(absent)
        present = [found[p] for p in dict.fromkeys(paths) if p in found]
        if not present:
            raise FileNotFoundError(f"none of the objects of {self.describe()} exist")
        return ObjectTable.from_infos(present, labels)

    def _resolve_manifest(self, where: str) -> ObjectTable:
        # Remote manifests are opened with this dataset's storage options (endpoint, token).
        fs = self.fs if "://" in where and where.split("://", 1)[0] == self.protocol else None
        entries = [e.info() for e in read_manifest(where, fs=fs, base=self.base_url)]
        for e in entries:
            if isinstance(e.get("label"), str):
                e["label"] = _label(e["label"])
        if not entries:
            raise ValueError(f"manifest {where} lists no objects")
        labels = {e["name"]: e.get("label") for e in entries if e.get("label") is not None}
        if all(e.get("size") is not None for e in entries):
            # JSON-lines manifests carry the metadata: no listing; a vanished object shows at read time.
            return ObjectTable.from_infos(entries, labels or None)
        return self._resolve_paths([e["name"] for e in entries], labels or None)

    def _missing_objects(self, paths: Sequence[str]) -> None:
        if not paths:
            return
        urls = [f"{self.protocol}://{p}" for p in paths]
        if self.on_missing == "raise":
            shown = ", ".join(urls[:5]) + (f" and {len(urls) - 5} more" if len(urls) > 5 else "")
            raise FileNotFoundError(
                f"{len(urls)} object(s) of {self.describe()} do not exist: {shown} "
                f"(pass on_missing='skip' to skip and count them)")
        self.missing.extend(urls)

    # -- reads -----------------------------------------------------------------------------

    def direct_fs(self, count: int):
        """A filesystem reading `count` objects as plain concurrent GETs, or None to use the composing one.

        A composite costs compose + GET + delete round trips in series; when `count` objects fit in one
        wave of concurrent GETs (the read concurrency), direct reads take one round trip. Measured with
        bench/training.py on the cloud profile (batch 64, 2 workers): map-style 974 -> 1,707 samples/s.
        Larger batches need several waves of direct GETs, where composites win again. An explicit
        `compose_threshold` in the storage options is respected.
        """
        fs = self.fs
        if not hasattr(fs, "cat_objects") or "compose_threshold" in self.storage_options:
            return None
        if count > fs.batch_read_concurrency:
            return None
        if self._direct_fs is None or self._direct_fs_pid != os.getpid():
            self._direct_fs = fsspec.filesystem(self.protocol, **{**self.storage_options, "compose_threshold": 0})
            self._direct_fs_pid = os.getpid()
        return self._direct_fs

    def fetch(self, indices: Sequence[int], latency_bound: bool = False) -> dict[str, Any]:
        """{name: bytes | exception} of the distinct objects `indices`, in one batched read (no missing policy).

        `latency_bound`: the caller waits for this batch alone (no prefetch behind it), so a batch small
        enough is read with direct GETs (`direct_fs`) rather than composites.
        """
        unique = list(dict.fromkeys(int(i) for i in indices))
        fs = (self.direct_fs(len(unique)) if latency_bound else None) or self.fs
        return read_infos(fs, [self.table.info(i) for i in unique])

    def read(self, indices: Sequence[int], latency_bound: bool = False,
             fetched: Optional[dict[str, Any]] = None) -> list[tuple[int, bytes]]:
        """Bytes of objects `indices` (in order, duplicates allowed) in one batched read; missing ones per policy.

        `fetched`: what `fetch(indices)` returned earlier (read ahead), instead of reading now.
        """
        table = self.table
        unique = list(dict.fromkeys(int(i) for i in indices))
        data = fetched if fetched is not None else self.fetch(unique, latency_bound)
        got: dict[int, bytes] = {}
        absent = []
        for i in unique:
            value = data.get(table.names[i])
            if isinstance(value, bytes):
                got[i] = value
            elif value is None or isinstance(value, FileNotFoundError):
                absent.append(table.names[i])
            else:
                raise value
        self._missing_objects(absent)
        return [(int(i), got[int(i)]) for i in indices if int(i) in got]


def _path_of(url: str) -> str:
    _, bucket, key = split_url(url)
    if not key:
        raise ValueError(f"{url!r} names a bucket, not an object")
    return f"{bucket}/{key}"


def list_objects(fs, bucket: str, key_prefix: str) -> Iterator[dict]:
    """Info dicts of every object whose key starts with `key_prefix`, streaming from the fast lister."""
    if hasattr(fs, "iter_objects"):
        for batch in fs.iter_objects(bucket, prefix=key_prefix):
            yield from batch
    else:  # another fsspec filesystem: one flat listing, filtered here (not all honour `prefix`)
        want = f"{bucket}/{key_prefix}"
        for info in fs.find(bucket, prefix=key_prefix, detail=True).values():
            name = info["name"].lstrip("/")
            if info.get("type", "file") == "file" and name.startswith(want):
                yield {**info, "name": name}


def lookup_objects(fs, paths: Sequence[str]) -> dict[str, dict]:
    """Info of each existing path among `paths` ("bucket/key"); absent ones are left out."""
    paths = list(dict.fromkeys(paths))
    if len(paths) <= _LOOKUP_INDIVIDUALLY:
        def one(path: str) -> Optional[dict]:
            try:
                info = fs.info(path)
            except FileNotFoundError:
                return None
            return info if info.get("type", "file") == "file" else None

        with ThreadPoolExecutor(16) as pool:
            infos = list(pool.map(one, paths))
        return {p: {**i, "name": p} for p, i in zip(paths, infos) if i is not None}
    found: dict[str, dict] = {}
    by_bucket: dict[str, list[str]] = {}
    for p in paths:
        bucket, _, key = p.partition("/")
        by_bucket.setdefault(bucket, []).append(key)
    for bucket, keys in by_bucket.items():
        wanted = set(keys)
        for info in list_objects(fs, bucket, os.path.commonprefix(keys)):
            if info["name"].partition("/")[2] in wanted:
                found[info["name"]] = info
    return found


def read_infos(fs, infos: list[dict]) -> dict[str, Any]:
    """{name: bytes or exception} for `infos`, in one compose-backed batched read where the filesystem has one."""
    sized = [i for i in infos if i.get("size") is not None]
    unsized = [i["name"] for i in infos if i.get("size") is None]
    out: dict[str, Any] = {}
    if sized:
        if hasattr(fs, "cat_objects"):
            out.update(fs.cat_objects(sized, on_error="return"))
        else:
            unsized.extend(i["name"] for i in sized)
    if unsized:  # no sizes to plan composites with: plain concurrent GETs
        got = fs.cat(list(dict.fromkeys(unsized)), on_error="return")
        out.update((k.lstrip("/"), v) for k, v in got.items())  # some filesystems spell paths "/bucket/key"
    return out


def _label(text: str) -> Any:
    """Integer labels become ints (what a loss function wants); anything else stays a string."""
    try:
        return int(text)
    except ValueError:
        return text

"""Which shards a dataset reads, resolved once: a prefix's `*.tar` objects, URLs or brace patterns, a manifest.

Each shard is known by its name, size and generation (what its reads are pinned to) and whether an
index (`<shard>.idx`) sits beside it. Shards without one are read by streaming from their first byte:
`resolve` warns once, naming how many. `read_index` loads one shard's index, refusing a stale one.
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any, Iterable, Optional, Sequence, Union

from braceexpand import braceexpand

from fluxfs.handle import FilesystemHandle, cache_lock

from ..data.manifests import manifest_infos
from ..data.object_store import lookup_objects, prefix_listing
from ..distributed.listing import check_list_once, list_once
from ..in_flight import in_order
from ..urls import DEFAULT_PROTOCOL, parse_url, url_protocol
from .errors import ShardError
from .index import INDEX_SUFFIX, ShardIndex, index_path
from .parts import MERGED_NAME, PARTITION_NAME

SHARD_SUFFIX = ".tar"
# What a prefix's shards end with when they are streamed: compressed tars too (random access needs ".tar").
STREAMED_SUFFIXES = (".tar", ".tar.gz", ".tgz")
# Indexes a process keeps loaded: a reader needs the one of the shard it reads (and of the few it reads
# ahead, or re-reads to resume); all of a large dataset's would be millions of members in memory.
INDEXES_KEPT = 16


class MissingIndexWarning(UserWarning):
    """Some shards have no index: they are streamed from their first byte (slower to resume and split)."""


class IncompletePackWarning(UserWarning):
    """A prefix holds a packing in parts (`fluxfs shard --part`) not yet complete: some parts' shards are missing."""


@dataclass(frozen=True)
class ShardInfo:
    """One shard: `path` "bucket/key", its size and generation when resolved, and whether it has an index."""

    path: str
    size: int
    generation: Optional[str] = None
    crc32c: Optional[str] = None
    has_index: bool = False

    def url(self, protocol: str = DEFAULT_PROTOCOL) -> str:
        return f"{protocol}://{self.path}"


def is_compressed_name(path: str) -> bool:
    """Whether a shard's name says it is compressed (no index is expected: compressed tars are only streamed)."""
    return path.endswith(STREAMED_SUFFIXES[1:])


def expand_urls(urls: Union[str, Iterable[str]]) -> list[str]:
    """URLs with brace patterns expanded (``shard-{000000..000099}.tar``), in the order given, duplicates kept once."""
    if isinstance(urls, str):
        urls = [urls]
    out: list[str] = []
    for url in urls:
        if not isinstance(url, str):
            raise TypeError(f"shard URLs are strings, not {type(url).__name__}: {url!r}")
        out.extend(braceexpand(url))
    return list(dict.fromkeys(out))


def urls_protocol(urls: Sequence[str]) -> str:
    """The one protocol of `urls` (bare "bucket/key" names count as flux); several is a ValueError."""
    protocols = {url_protocol(u) or DEFAULT_PROTOCOL for u in urls}
    if len(protocols) > 1:
        raise ValueError(f"shard URLs mix protocols {sorted(protocols)}; use one filesystem")
    return protocols.pop() if protocols else DEFAULT_PROTOCOL


def _info(row: dict, has_index: bool) -> ShardInfo:
    gen = row.get("generation")
    return ShardInfo(row["name"], int(row.get("size") or 0), None if gen is None else str(gen), row.get("crc32c"),
                     has_index)


def shards_under_prefix(fs: Any, url: str, suffixes: Sequence[str] = (SHARD_SUFFIX,),
                        bare: bool = False) -> list[ShardInfo]:
    """Every object below the URL's directory (``.../train`` is ``train/``: `prefix_listing`) that ends with one
    of `suffixes` (`*.tar`), sorted by name; none is FileNotFoundError. `bare`: every key starting with the URL's."""
    parsed = parse_url(url)
    if not parsed.bucket:
        raise ValueError(f"no bucket in {url!r}: expected {parsed.protocol}://BUCKET/PREFIX")
    rows = prefix_listing(fs, url, parsed.bucket, parsed.key, bare, keep=lambda r: r["name"].endswith(tuple(suffixes)))
    names = {r["name"] for r in rows}
    shards = sorted((r for r in rows if r["name"].endswith(tuple(suffixes))), key=lambda r: r["name"])
    for name in sorted(n for n in names if n.endswith("/" + PARTITION_NAME)):
        merged = name[: -len(PARTITION_NAME)] + MERGED_NAME
        if merged not in names:
            warnings.warn(f"{parsed.protocol}://{name[: -len(PARTITION_NAME)]} holds a packing in parts that is not "
                          f"complete (no {MERGED_NAME} yet): the shards of the parts still running are missing; "
                          f"`fluxfs shard --merge` names them", IncompletePackWarning, stacklevel=4)
    if not shards:
        packed = sum(r["name"].endswith(STREAMED_SUFFIXES) for r in rows)
        hint = (f": {packed} of them are compressed tars, which only FluxShardDataset and ReadShards read "
                f"(random access needs uncompressed .tar shards)" if packed else "")
        raise FileNotFoundError(f"no {'/'.join(suffixes)} shards under {url} ({len(rows)} other objects){hint}")
    return [_info(r, index_path(r["name"]) in names) for r in shards]


def shards_named(fs: Any, urls: Sequence[str], rows: Optional[list[dict]] = None) -> list[ShardInfo]:
    """The shards `urls` name (in that order), looked up with their indexes; missing ones are FileNotFoundError.

    `rows`: info dicts already known (a manifest's), so only the indexes are looked up.
    """
    paths = []
    for url in urls:
        parsed = parse_url(url)
        if not parsed.bucket or not parsed.key or parsed.key.endswith("/"):
            raise ValueError(f"{url!r} does not name a shard object (expected PROTOCOL://BUCKET/KEY.tar)")
        paths.append(parsed.path)
    known = {r["name"]: r for r in rows or ()}
    wanted = [p for p in paths if p not in known] + [index_path(p) for p in paths]
    found = lookup_objects(fs, wanted) if wanted else {}
    absent = [p for p in paths if p not in known and p not in found]
    if absent:
        shown = ", ".join(absent[:5]) + (f" and {len(absent) - 5} more" if len(absent) > 5 else "")
        raise FileNotFoundError(f"{len(absent)} of {len(paths)} shard(s) do not exist: {shown}")
    return [_info(known.get(p) or found[p], index_path(p) in found) for p in paths]


def shards_in_manifest(fs: Any, where: str, base_url: Optional[str] = None,
                       protocol: str = DEFAULT_PROTOCOL) -> list[ShardInfo]:
    """The shards a manifest lists (JSON lines or ``key<TAB>...`` text; index files in it are ignored).

    A manifest on the shards' filesystem is read with `fs` (its endpoint and token), any other (a local
    file) with its own.
    """
    own = fs if url_protocol(where) == protocol else None
    rows = [r for r in manifest_infos(where, fs=own, base=base_url) if not r["name"].endswith(INDEX_SUFFIX)]
    if not rows:
        raise ValueError(f"manifest {where} lists no shards")
    sized = [r for r in rows if r.get("size") is not None]
    return shards_named(fs, [f"{protocol}://{r['name']}" for r in rows], sized)


def warn_missing_indexes(shards: Sequence[ShardInfo], protocol: str, stacklevel: int = 3) -> None:
    """One warning naming how many shards have no index (they are streamed instead)."""
    missing = [s for s in shards if not s.has_index and not is_compressed_name(s.path)]
    if missing:
        warnings.warn(
            f"{len(missing)} of {len(shards)} shard(s) have no index ({missing[0].url(protocol)}{index_path('')}"
            f"{' and others' if len(missing) > 1 else ''} not found): they are read by streaming from their "
            f"first byte; build indexes with `fluxfs shard index`", MissingIndexWarning, stacklevel=stacklevel)


def read_index(fs: Any, shard: ShardInfo, must_exist: bool = False) -> Optional[ShardIndex]:
    """The shard's index, checked against the shard's size and generation; None when it has none.

    A stale index (the shard replaced after indexing) is a ShardError naming the shard. `must_exist`:
    the index was listed, so its absence now is an error too (readers splitting a shard by its index
    must all see it).
    """
    if not shard.has_index:
        return None
    try:
        with cache_lock(fs):  # read beside a shard's ranges in flight on threads: an fsspec cache is not thread-safe
            data = fs.cat_file(index_path(shard.path))
    except FileNotFoundError:
        if must_exist:
            raise ShardError(index_path(shard.path), None, "the index was deleted after the shards were listed") \
                from None
        return None
    index = ShardIndex.from_bytes(shard.path, data)
    index.check_current(shard.size, shard.generation)
    return index


class ShardCatalog:
    """A prefix, URL list (brace patterns allowed) or manifest of shards, resolved once, with per-process reads.

    Resolved in the process that first asks (the main process, before DataLoader workers start) and
    carried to workers when pickled; each process builds its own filesystem (a `FilesystemHandle`
    of the URLs' protocol or fsspec chain and `storage_options`) and caches the indexes it loads.
    """

    KINDS = ("prefix", "urls", "manifest")

    def __init__(self, kind: str, target: Any, *, storage_options: Optional[dict] = None,
                 base_url: Optional[str] = None, list_once: bool = True, bare_prefix: bool = False):
        if kind not in self.KINDS:
            raise ValueError(f"kind must be one of {self.KINDS}, not {kind!r}")
        self.kind, self.base_url = kind, base_url
        self.bare_prefix = bool(bare_prefix)  # a prefix without '/' is every key starting with it, not a directory
        self.storage_options = dict(storage_options or {})
        self.list_once = check_list_once(list_once, "ShardCatalog")  # rank 0 lists, the others receive
        if kind == "urls":
            target = expand_urls(target)
            if not target:
                raise ValueError("from_shards needs at least one shard URL")
            self.protocol = urls_protocol(target)
        elif kind == "prefix":
            self.protocol = url_protocol(target) or DEFAULT_PROTOCOL
        else:
            hint = url_protocol(base_url or "") or url_protocol(target)
            self.protocol = hint if hint not in (None, "file") else DEFAULT_PROTOCOL
        self.target = target
        self.handle = FilesystemHandle(self.protocol, self.storage_options)
        self._shards: Optional[list[ShardInfo]] = None
        self._indexes: dict[int, Optional[ShardIndex]] = {}

    def describe(self) -> str:
        return f"{len(self.target)} shard URLs" if self.kind == "urls" else f"{self.kind} {self.target}"

    @property
    def fs(self) -> Any:
        """This process's filesystem (a forked or spawned worker builds its own, through the handle)."""
        return self.handle.fs

    def __getstate__(self) -> dict:
        self.shards  # noqa: B018  (resolve before pickling: spawned workers get the list)
        state = dict(self.__dict__)
        state["_indexes"] = {}  # the handle pickles without its filesystem
        return state

    @property
    def shards(self) -> list[ShardInfo]:
        """The shards, resolved on first use (one warning if some have no index)."""
        if self._shards is None:
            shards = list_once(self._resolve, f"the shards of {self.describe()}", self.list_once)
            warn_missing_indexes(shards, self.protocol, stacklevel=4)
            self._shards = shards
        return self._shards

    def _resolve(self) -> list[ShardInfo]:
        if self.kind == "prefix":
            return shards_under_prefix(self.fs, self.target, STREAMED_SUFFIXES, self.bare_prefix)
        if self.kind == "urls":
            return shards_named(self.fs, self.target)
        return shards_in_manifest(self.fs, self.target, self.base_url, self.protocol)

    def __len__(self) -> int:
        return len(self.shards)

    def index(self, i: int, ahead: Sequence[int] = ()) -> Optional[ShardIndex]:
        """Shard `i`'s index, or None when it has none; the last INDEXES_KEPT loaded stay in memory. `ahead`: shards
        whose indexes are wanted next, read at once beside this one (one round trip, not one per shard); one that
        fails is read again, and its error raised, when it is asked for."""
        if i in self._indexes:
            self._indexes[i] = self._indexes.pop(i)  # most recently used last
            return self._indexes[i]
        more = [j for j in dict.fromkeys(ahead) if j != i and j not in self._indexes and self.shards[j].has_index]
        if not more:
            self._keep(i, read_index(self.fs, self.shards[i], must_exist=True))
            return self._indexes[i]
        for j, got in in_order(more[:INDEXES_KEPT - 1] + [i], self._read_or_error, INDEXES_KEPT, "fluxfs-index"):
            if j == i and isinstance(got, Exception):
                raise got
            if not isinstance(got, Exception):
                self._keep(j, got)
        return self._indexes[i]

    def _read_or_error(self, i: int) -> Union[Optional[ShardIndex], Exception]:
        try:
            return read_index(self.fs, self.shards[i], must_exist=True)
        except Exception as e:  # raised when that index is asked for (read again then)
            return e

    def _keep(self, i: int, index: Optional[ShardIndex]) -> None:
        self._indexes[i] = index
        while len(self._indexes) > INDEXES_KEPT:
            del self._indexes[next(iter(self._indexes))]

"""`ReadShards`: a torchdata Node that turns shard URLs (or info dicts) into samples, resumably.

It composes with torchdata's nodes, e.g.
``Loader(Prefetcher(Batcher(ParallelMapper(ReadShards(IterableWrapper(urls)), decode, 4), 64), 2))``.
Its state is where the source was when the current shard was taken, that shard, and how many of its
samples were handed out, so a restored pipeline continues at the next sample.
"""
from __future__ import annotations

import warnings
from typing import Any, Callable, Dict, Iterator, Optional, Sequence, Union

from torchdata.nodes.base_node import BaseNode

from fluxfs.handle import FilesystemHandle

from ..data.resume import ResumeStateError, bad, check_int, is_int, need
from ..options import merge_storage_options
from ..urls import DEFAULT_PROTOCOL, parse_url, url_protocol
from .catalog import MissingIndexWarning, ShardInfo, is_compressed_name, read_index
from .index import INDEX_SUFFIX, index_path
from .stream import DEFAULT_RANGE_SIZE, DEFAULT_RANGES_IN_FLIGHT, ShardReader, UnitRead


class ReadShards(BaseNode[Any]):
    """Samples (``{"__key__", "__shard__", ext: bytes...}``, or `transform` of them) of each shard its source yields.

    Source items: shard URLs, or info dicts as `ListObjects` yields (their size and generation save
    a metadata request; index files among them are skipped). An info dict with ``first`` and ``count``
    (as `ShardPieces` yields: under DDP, each rank's equal share) stands for those samples of the shard.
    A shard without an index is streamed from its first byte (one `MissingIndexWarning` per node).

    Args:
        source: node yielding shard URLs or info dicts.
        storage_options: for the filesystem (also as keyword arguments, merged).
        protocol: the filesystem (protocol or fsspec chain, ``filecache::flux``) of info dicts (URLs carry their own).
        extensions: if given, every sample must have these members (others are dropped).
        range_size, ranges_in_flight: ranged GETs per shard, their size and how many run at once.
        transform: ``f(sample) -> Any``.
    """

    SOURCE_KEY = "source"  # the source's state just after the current shard was taken from it
    SHARD_KEY = "shard"  # the current shard: [path, size, generation, has_index], or None
    SAMPLES_KEY = "samples"  # samples of the current shard handed out (its first sample's number, for a piece)
    UNTIL_KEY = "until"  # where the current piece of the shard ends (a sample number), or None: the shard's end

    def __init__(self, source: BaseNode, *, storage_options: Optional[dict] = None, protocol: Optional[str] = None,
                 extensions: Optional[Sequence[str]] = None, range_size: int = DEFAULT_RANGE_SIZE,
                 ranges_in_flight: int = DEFAULT_RANGES_IN_FLIGHT,
                 transform: Optional[Callable[[dict], Any]] = None, **options: Any):
        super().__init__()
        self.source = source
        self.storage_options = merge_storage_options("ReadShards", storage_options, options)
        self.protocol = protocol
        self.extensions = extensions
        self.range_size, self.ranges_in_flight = range_size, ranges_in_flight
        ShardReader(None, range_size=range_size, in_flight=ranges_in_flight)  # check them now
        self.transform = transform
        self._handle: Optional[FilesystemHandle] = None  # of `protocol`, once known (the first URL tells)
        self._warned = False
        self._samples: Optional[Iterator] = None

    @property
    def handle(self) -> FilesystemHandle:
        """The handle of this node's filesystem: pickles without it, rebuilt in a forked or spawned worker."""
        chain = self.protocol or DEFAULT_PROTOCOL
        if self._handle is None or self._handle.chain != chain:
            self._handle = FilesystemHandle(chain, self.storage_options)
        return self._handle

    @property
    def fs(self) -> Any:
        """This process's filesystem (a forked or spawned worker builds its own, through the handle)."""
        return self.handle.fs

    def reset(self, initial_state: Optional[Dict[str, Any]] = None):
        super().reset(initial_state)
        self._close()
        self._shard: Optional[ShardInfo] = None
        self._handed = 0
        self._until: Optional[int] = None
        if initial_state is not None:
            source = need(initial_state, self.SOURCE_KEY, "ReadShards")
            shard, skip = self._checked(initial_state)
            until = check_int("ReadShards", self.UNTIL_KEY, initial_state.get(self.UNTIL_KEY), lo=skip, optional=True)
            self.source.reset(source)
            self._source_state = source
            if shard is not None:
                self._open(shard, skip, until)
        else:
            self.source.reset()
            self._source_state = self.source.state_dict()

    def _checked(self, state: Any) -> tuple[Optional[ShardInfo], int]:
        """(the current shard, samples of it handed out) of a saved state; anything else is a ResumeStateError."""
        shard, samples = need(state, self.SHARD_KEY, "ReadShards"), need(state, self.SAMPLES_KEY, "ReadShards")
        samples = check_int("ReadShards", self.SAMPLES_KEY, samples)
        if shard is None:
            if samples:
                raise bad("ReadShards", self.SAMPLES_KEY, f"0 when {self.SHARD_KEY!r} is None", samples)
            return None, 0
        ok = (isinstance(shard, (list, tuple)) and len(shard) == 5 and isinstance(shard[0], str) and shard[0]
              and is_int(shard[1]) and shard[1] >= 0 and all(v is None or isinstance(v, str) for v in shard[2:4])
              and isinstance(shard[4], bool))
        if not ok:
            raise bad("ReadShards", self.SHARD_KEY, "None or [path, size >= 0, generation or None, crc32c or None, "
                      "has_index]", shard)
        return ShardInfo(shard[0], int(shard[1]), *shard[2:]), samples  # type: ignore[return-value]

    def _close(self) -> None:
        samples, self._samples = getattr(self, "_samples", None), None
        if samples is not None:
            samples.close()  # type: ignore[attr-defined]

    def _info(self, item: Union[str, dict]) -> Optional[ShardInfo]:
        """The shard an item names (None for an index file), its size and generation looked up if not given."""
        self._piece = (0, None)
        if isinstance(item, dict) and ("first" in item or "count" in item):  # a piece: samples [first, first+count)
            first = check_int("ReadShards", "first", item.get("first", 0))
            count = check_int("ReadShards", "count", item.get("count"), optional=True)
            self._piece = (first, None if count is None else first + count)  # type: ignore[operator]
        if isinstance(item, str):
            protocol = url_protocol(item)
            if self.protocol is None:
                self.protocol = protocol or DEFAULT_PROTOCOL
            elif protocol is not None and protocol != self.protocol:
                raise ValueError(f"ReadShards reads one filesystem ({self.protocol}://), not {item}")
            path = parse_url(item).path
            info: dict = {"name": path}
        elif isinstance(item, dict):
            info, path = item, item["name"]
        else:
            raise TypeError(f"ReadShards reads shard URLs or info dicts, not {type(item).__name__}")
        if path.endswith(INDEX_SUFFIX):
            return None
        if info.get("size") is None or info.get("generation") is None:
            info = {**self.fs.info(path), "name": path}
        gen = info.get("generation")
        return ShardInfo(path, int(info.get("size") or 0), None if gen is None else str(gen), info.get("crc32c"),
                         True)

    def _open(self, shard: ShardInfo, skip: int, until: Optional[int] = None) -> None:
        index = read_index(self.fs, shard)
        if index is None and not self._warned and not is_compressed_name(shard.path):
            self._warned = True
            warnings.warn(f"{shard.url(self.protocol or DEFAULT_PROTOCOL)} has no index "
                          f"({index_path(shard.path).rsplit('/', 1)[-1]} not found): streaming it from its first "
                          f"byte; build indexes with `fluxfs shard index`", MissingIndexWarning, stacklevel=2)
        reader = ShardReader(self.fs, range_size=self.range_size, in_flight=self.ranges_in_flight,
                             extensions=self.extensions)
        if index is not None and skip > len(index.samples):  # a restored state past the shard's end
            raise ResumeStateError(f"ReadShards resume state: {self.SAMPLES_KEY!r} must be in 0..{len(index.samples)}"
                                   f" ({shard.url(self.protocol or DEFAULT_PROTOCOL)} has {len(index.samples)} "
                                   f"samples), not {skip}")
        unit = UnitRead(shard, shard.url(self.protocol or DEFAULT_PROTOCOL), first=skip,
                        count=None if until is None else until - skip)
        self._shard, self._handed, self._until = shard, skip, until
        self._samples = reader.samples(unit, index)

    def next(self) -> Any:
        while True:
            if self._samples is not None:
                got = next(self._samples, None)
                if got is not None:
                    self._handed = got[0] + 1
                    sample = got[1]
                    return self.transform(sample) if self.transform is not None else sample
                self._samples, self._shard, self._handed, self._until = None, None, 0, None
            shard = None
            while shard is None:
                shard = self._info(next(self.source))  # StopIteration ends this node too
            self._source_state = self.source.state_dict()
            self._open(shard, *self._piece)

    def get_state(self) -> Dict[str, Any]:
        shard = self._shard
        return {self.SOURCE_KEY: self._source_state,
                self.SHARD_KEY: None if shard is None else [shard.path, shard.size, shard.generation, shard.crc32c,
                                                            shard.has_index],
                self.SAMPLES_KEY: self._handed, self.UNTIL_KEY: self._until}

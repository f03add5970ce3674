"""torchdata Nodes: `ListObjects` streams a prefix's listing, `ReadObjects` reads objects in batched compose reads.

They compose with torchdata's own nodes, e.g.
``Loader(Batcher(ParallelMapper(ReadObjects(ListObjects("flux://b/train/")), decode, 4), 64))``,
and resume from `state_dict()` like them.
"""
from __future__ import annotations

from typing import Any, Dict, Iterator, Optional, Union

from torchdata.nodes.base_node import BaseNode

from fluxfs.handle import FilesystemHandle

from .object_store import read_infos, stream_listing
from ..in_flight import InFlight
from ..options import merge_storage_options
from ..urls import DEFAULT_PROTOCOL, url_protocol
from .objects import Transform, key_and_bytes, meta_from_info
from .resume import ResumeStateError, bad, check_int, need
from .source import MISSING_POLICIES, split_url


# Batched reads ReadObjects keeps in flight: a pipeline of Nodes reads in one process, and each
# compose-backed read of a batch is ~3 round trips. Cloud profile, 20,000 images of 10-100 KB,
# batches of 64, no training: ~1,900 samples/s at 4 in flight, ~3,500 at 8. Training (the
# in-memory limit at ~6,500 samples/s), three runs each, interleaved pairs: ~3,650 at 8 (41% of the
# step waiting for data), ~4,350 at 16 (11%). Memory: 16 x 32 objects x object size.
NODES_PREFETCH = 16


class ListObjects(BaseNode[Dict[str, Any]]):
    """Streams the info dicts (name "bucket/key", size, generation, crc32c) of every object under a prefix.

    Args:
        url: ``flux://bucket/key-prefix`` (or an fsspec chain such as ``filecache::flux://bucket/key-prefix``).
        storage_options: passed to the filesystem (also as keyword arguments, merged); per protocol for a chain.
        sort: yield in name order (needed to resume: the state is the last name yielded).
    """

    LAST_NAME_KEY = "last_name"
    YIELDED_KEY = "yielded"

    def __init__(self, url: str, *, storage_options: Optional[dict] = None, sort: bool = True, **options: Any):
        super().__init__()
        self.url = url
        self.protocol, self.bucket, self.key_prefix = split_url(url)
        self.storage_options = merge_storage_options("ListObjects", storage_options, options)
        self.handle = FilesystemHandle(self.protocol, self.storage_options)  # built per process
        self.sort = sort
        self._listing: Optional[Iterator[dict]] = None
        self._last_name: Optional[str] = None
        self._yielded = 0

    def reset(self, initial_state: Optional[Dict[str, Any]] = None):
        super().reset(initial_state)
        if self._listing is not None:
            self._listing.close()  # type: ignore[attr-defined]
        self._last_name, self._yielded = None, 0
        if initial_state is not None:
            self._last_name, self._yielded = self._checked(initial_state)
        fs = self.handle.fs
        # A module-level generator, not a method: a generator holding `self` would make a reference
        # cycle, and a cycle may be collected on fsspec's event-loop thread, where closing the
        # listing (a blocking call onto that loop) cannot run.
        self._listing = stream_listing(fs, self.url, self.bucket, self.key_prefix, self.sort, self._last_name)

    def _checked(self, state: Any) -> tuple[Optional[str], int]:
        """(last name, yielded) of a state this listing saved; anything else is a ResumeStateError naming it."""
        owner = f"ListObjects({self.url})"
        last, yielded = need(state, self.LAST_NAME_KEY, owner), need(state, self.YIELDED_KEY, owner)
        yielded = check_int(owner, self.YIELDED_KEY, yielded)
        if yielded and not self.sort:
            raise ResumeStateError(f"{owner} resumes only with sort=True: unsorted order differs per run")
        under = f"{self.bucket}/{self.key_prefix}"
        if (last is None) != (yielded == 0) or (last is not None and not (isinstance(last, str)
                                                                         and last.startswith(under))):
            raise bad(owner, self.LAST_NAME_KEY, f"the name of the last object yielded, under {under!r} "
                      f"(None when {self.YIELDED_KEY!r} is 0; it is {yielded})", last)
        return last, yielded  # type: ignore[return-value]

    def next(self) -> Dict[str, Any]:
        info = next(self._listing)  # type: ignore[arg-type]
        self._last_name = info["name"]
        self._yielded += 1
        return info

    def get_state(self) -> Dict[str, Any]:
        return {self.LAST_NAME_KEY: self._last_name, self.YIELDED_KEY: self._yielded}


class ReadObjects(BaseNode[Any]):
    """Reads the objects its source yields, `batch_size` per compose-backed batched read, `prefetch` batches ahead.

    Source items are info dicts (as `ListObjects` yields; sizes let reads be composed) or URLs.
    Each output item is ``transform(bytes, ObjectMeta)``; the default gives ``(key, bytes)``.

    Args:
        source: node yielding info dicts or URL strings.
        storage_options: passed to the filesystem (built lazily, in the process that reads); also as
            keyword arguments, merged.
        protocol: filesystem protocol (or fsspec chain, ``filecache::flux``) for info dicts and URLs; by
            default a `ListObjects` source's, else ``flux``. A URL of another protocol is a ValueError.
        batch_size: objects per batched read (not the training batch: compose with `Batcher` for that).
        prefetch: batched reads in flight on threads, at most.
        transform: ``f(data: bytes, meta: ObjectMeta) -> Any``.
        on_missing: "raise" (FileNotFoundError naming the object) or "skip" (counted in `missing`).
    """

    SOURCE_KEY = "source"
    OFFSET_KEY = "offset"  # items of the current batch already handed out

    def __init__(self, source: BaseNode, *, storage_options: Optional[dict] = None, protocol: Optional[str] = None,
                 batch_size: int = 32, prefetch: int = NODES_PREFETCH, transform: Optional[Transform] = None,
                 on_missing: str = "raise", **options: Any):
        super().__init__()
        if batch_size < 1 or prefetch < 1:
            raise ValueError(f"batch_size and prefetch must be >= 1, not {batch_size} and {prefetch}")
        if on_missing not in MISSING_POLICIES:
            raise ValueError(f"on_missing must be one of {MISSING_POLICIES}, not {on_missing!r}")
        self.source = source
        self.storage_options = merge_storage_options("ReadObjects", storage_options, options)
        self.protocol = protocol or (source.protocol if isinstance(source, ListObjects) else DEFAULT_PROTOCOL)
        self.handle = FilesystemHandle(self.protocol, self.storage_options)  # each process builds its own filesystem
        self.batch_size, self.prefetch = batch_size, prefetch
        self.transform = transform or key_and_bytes
        self.on_missing = on_missing
        self.missing: list[str] = []
        self._reads: Optional[InFlight[dict]] = None
        self._shut_down = False

    @property
    def fs(self) -> Any:
        """This process's filesystem (a forked or spawned worker builds its own, through the handle)."""
        return self.handle.fs

    def reset(self, initial_state: Optional[Dict[str, Any]] = None):
        super().reset(initial_state)
        self._stop()
        # Each batch's tag: (source state before it was pulled, infos, first offset to hand out).
        self._reads = InFlight(self.prefetch, thread_name_prefix="fluxfs-read")
        self._shut_down = False
        self._current: Optional[tuple] = None
        self._results: dict = {}
        self._offset = 0
        self._source_done = False
        if initial_state is not None:
            source = need(initial_state, self.SOURCE_KEY, "ReadObjects")
            offset = need(initial_state, self.OFFSET_KEY, "ReadObjects")
            # items of the batch handed out: fewer than a batch (more would skip items never handed out)
            self._skip = check_int("ReadObjects", self.OFFSET_KEY, offset, hi=self.batch_size - 1)  # type: ignore
            self.source.reset(source)
            self._restored: Optional[Dict[str, Any]] = initial_state
        else:
            self.source.reset()
            self._skip, self._restored = 0, None

    def shutdown(self) -> None:
        """Stop the read threads and wait for them to exit (reads not started are dropped); idempotent.

        `state_dict()` still tells where the node got to; it reads again after `reset()`. The threads
        also stop when the source runs out, on the next `reset()` and when the node is deleted.
        """
        self._shut_down = True
        self._stop(wait=True)

    def _stop(self, wait: bool = False) -> None:
        reads = getattr(self, "_reads", None)  # None before the first reset (or a failed __init__)
        if reads is not None:
            reads.shutdown(wait=wait)

    def __del__(self):
        self._stop()

    def _fill(self) -> None:
        """Pull batches from the source and start their reads until `prefetch` are in flight."""
        reads = self._reads
        while not self._source_done and not reads.full:  # type: ignore[union-attr]
            state = self.source.state_dict()
            items = []
            while len(items) < self.batch_size:
                try:
                    items.append(_as_info(next(self.source), self.protocol))
                except StopIteration:
                    self._source_done = True
                    break
            if not items:
                return
            skip, self._skip = self._skip, 0  # only the first batch after a restore is partly consumed
            reads.submit((state, items, skip), read_infos, self.fs, items[skip:])  # type: ignore[union-attr]

    def next(self) -> Any:
        if self._shut_down:
            raise RuntimeError("ReadObjects was shut down: reset() it to read again")
        while True:
            if self._current is not None and self._offset < len(self._current[1]):
                info = self._current[1][self._offset]
                self._offset += 1
                data = self._results.get(info["name"])
                if isinstance(data, bytes):
                    return self.transform(data, meta_from_info(info, data, self.protocol))
                self._not_read(info, data)
                continue
            self._fill()
            reads = self._reads
            if not reads:
                reads.shutdown()  # type: ignore[union-attr]  # the source ran out: free the threads now
                raise StopIteration()
            self._current, self._results = reads.pop()  # type: ignore[union-attr]
            self._offset = self._current[2]
            self._restored = None
            self._fill()  # keep `prefetch` reads going while this batch is consumed

    def _not_read(self, info: dict, value: Any) -> None:
        if value is not None and not isinstance(value, FileNotFoundError):
            raise value
        url = self.handle.url(info["name"])
        if self.on_missing == "raise":
            raise FileNotFoundError(f"{url} does not exist (pass on_missing='skip' to skip and count)")
        self.missing.append(url)

    def get_state(self) -> Dict[str, Any]:
        if self._restored is not None:
            return self._restored
        if self._current is not None and self._offset < len(self._current[1]):
            return {self.SOURCE_KEY: self._current[0], self.OFFSET_KEY: self._offset}
        if self._reads:
            state, _, skip = self._reads.first_tag()
            return {self.SOURCE_KEY: state, self.OFFSET_KEY: skip}
        return {self.SOURCE_KEY: self.source.state_dict(), self.OFFSET_KEY: 0}


def _as_info(item: Union[dict, str], protocol: str) -> dict:
    if isinstance(item, dict):
        return item
    if isinstance(item, str):
        if url_protocol(item) not in (None, protocol):  # read through another filesystem (around a cache)
            raise ValueError(f"ReadObjects reads {protocol}:// objects, not {item}: pass "
                             f"protocol={url_protocol(item)!r} (and its storage options) to read that filesystem")
        return {"name": split_url(item).path}
    raise TypeError(f"ReadObjects reads info dicts or URLs, not {type(item).__name__}")


"""A picklable, fork-safe handle to a filesystem, and the one check for fluxfs's accelerations.

`FilesystemHandle` keeps what builds a filesystem (an fsspec protocol or URL chain, ``flux`` or
``filecache::flux``, and its storage options), never the filesystem: each process builds its own on
first use (a forked child after the fork hook, a spawned one after unpickling), because a gcsfs-based
filesystem's event loop and sockets do not survive a fork. It lives in fluxfs rather than pipes since
it registers with the one fork hook (`fluxfs.gcs.fork`) and `accelerated` knows `FluxFileSystem`.
"""
from __future__ import annotations

import contextlib
import inspect
import threading
from typing import TYPE_CHECKING, Any, ContextManager, Mapping, Optional

import fsspec
import fsspec.core

from .gcs import fork
from .gcs.urls import DEFAULT_PROTOCOL, url_protocol

if TYPE_CHECKING:
    from .core import FluxFileSystem

__all__ = ["FilesystemHandle", "accelerated", "cache_lock"]

# fsspec's caches (filecache::, simplecache::) keep their index in one dict and one file, without a lock:
# reads on several threads (prefetch, read-ahead, ranges in flight) lost entries, so the next epoch read
# them again, or failed ("cannot unpack non-iterable bool object") when one thread's entry went missing.
class _CacheLock:
    """The one lock (a forked child makes a new one: a thread of the parent may have held it at the fork)."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        fork.reset_in_child(self)

    def _after_fork(self) -> None:
        self.lock = threading.RLock()


_CACHE_LOCK = _CacheLock()


def accelerated(fs: Any) -> Optional["FluxFileSystem"]:
    """`fs` when it IS a `FluxFileSystem` (batched compose reads, fast listing, pinned generations), else None.

    A type check, not `hasattr`: fsspec's caching filesystems (``filecache::``, ``simplecache::``,
    ``blockcache::``) forward unknown attributes to the filesystem they wrap, so asking them for
    `cat_objects` would find flux's and read around the cache. Those go through their own `cat`/`open`.
    """
    from .core import FluxFileSystem  # here: gcsfs costs seconds to import, and a caller has a filesystem

    return fs if isinstance(fs, FluxFileSystem) else None


def cache_lock(fs: Any) -> ContextManager:
    """A lock to hold around calls into `fs` when it is an fsspec cache (not thread-safe), else a no-op."""
    from fsspec.implementations.cached import CachingFileSystem

    return _CACHE_LOCK.lock if isinstance(fs, CachingFileSystem) else contextlib.nullcontext()


class FilesystemHandle:
    """The filesystem of `chain` (``"flux"``, ``"filecache::flux"``) with `storage_options`, built per process.

    Storage options follow fsspec: for one protocol a flat dict (``{"endpoint_url": ...}``); for a chain,
    one dict per protocol (``{"flux": {"endpoint_url": ...}, "filecache": {"cache_storage": DIR}}``),
    flat keys going to the outermost filesystem, as `fsspec.open` does. Pickling keeps the recipe only.
    """

    def __init__(self, chain: str = DEFAULT_PROTOCOL, storage_options: Optional[Mapping[str, Any]] = None):
        if not isinstance(chain, str) or not chain or "://" in chain:
            raise ValueError(f"a filesystem handle takes a protocol or chain such as 'flux' or "
                             f"'filecache::flux', not {chain!r}")
        self.chain = chain
        self.storage_options = dict(storage_options or {})
        if "::" in chain:
            _check_chain_options(chain, self.storage_options)
        self._fs: Any = None
        fork.reset_in_child(self)

    @classmethod
    def from_url(cls, url: str, storage_options: Optional[Mapping[str, Any]] = None,
                 default: str = DEFAULT_PROTOCOL) -> "FilesystemHandle":
        """The handle of a URL's protocol or chain (``filecache::flux://b/p`` -> ``filecache::flux``)."""
        return cls(url_protocol(str(url)) or default, storage_options)

    def with_options(self, **options: Any) -> "FilesystemHandle":
        """Another handle to the same chain, `options` added to its storage options."""
        return type(self)(self.chain, {**self.storage_options, **options})

    @property
    def fs(self) -> Any:
        """This process's filesystem, built on first use (a forked or spawned worker builds its own)."""
        if self._fs is None:
            if "::" in self.chain:
                self._fs = fsspec.core.url_to_fs(f"{self.chain}://", **self.storage_options)[0]
            else:  # through fsspec.filesystem, so FSSPEC_<PROTOCOL>_* variables and fsspec's config apply
                self._fs = fsspec.filesystem(self.chain, **self.storage_options)
        return self._fs

    def url(self, path: str) -> str:
        """``chain://bucket/key`` for a "bucket/key" path: how errors and sample metadata name an object."""
        return f"{self.chain}://{path}"

    def _after_fork(self) -> None:
        self._fs = None

    def __getstate__(self) -> dict:
        return {"chain": self.chain, "storage_options": self.storage_options}

    def __setstate__(self, state: dict) -> None:
        self.chain, self.storage_options, self._fs = state["chain"], state["storage_options"], None
        fork.reset_in_child(self)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, FilesystemHandle):
            return NotImplemented
        return (self.chain, self.storage_options) == (other.chain, other.storage_options)

    __hash__ = None  # type: ignore[assignment]  # mutable options

    def __repr__(self) -> str:  # never the options: they may hold credentials
        return f"FilesystemHandle({self.chain!r})"


def _check_chain_options(chain: str, options: Mapping[str, Any]) -> None:
    """Flat options a cache in front of the chain would silently drop (it takes **kwargs) are a TypeError."""
    from fsspec.implementations.cached import CachingFileSystem

    protocols = chain.split("::")
    outer = fsspec.get_filesystem_class(protocols[0])
    if not issubclass(outer, CachingFileSystem):
        return
    named = {n for c in outer.__mro__ if "__init__" in vars(c) for n in inspect.signature(c.__init__).parameters}
    unknown = sorted(k for k in options if k not in named and k not in protocols)
    if unknown:
        inner = protocols[-1]
        raise TypeError(
            f"storage option(s) {', '.join(map(repr, unknown))} for {chain}://: {protocols[0]} does not take them "
            f"(fsspec gives flat options to the outermost filesystem); options of an inner filesystem go under "
            f"its protocol: storage_options={{{inner!r}: {{{unknown[0]!r}: ...}}}}")

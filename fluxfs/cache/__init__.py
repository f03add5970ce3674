"""The node-local cache: one copy of each object generation per node, shared by every process on it.

`NodeCache(dir, limit)` (store.py) is the cache. It never holds the filesystem: storage is read through
the `Fetcher` (fetcher.py) the filesystem's side builds from its client (`fluxfs/reads/cached.py`, where
`cached_cat(fs, info)` lives). Modules: limit (size text), entry (names, sidecar), lock (flock, the bounded
wait), evict (LRU and accounting), body (checking what a fetch returns), store (fill and lookup), reader
(whole objects), ranges (byte ranges), objects (`cat_objects`: many small objects), claims (their misses claimed
before they are read: one download per node), packs and index (where those live: pack files and their SQLite
index). Never imports torch.
"""
from .fetcher import Fetcher
from .reader import cache_of
from .store import NodeCache

__all__ = ["Fetcher", "NodeCache", "cache_of"]

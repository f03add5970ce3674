"""The node-local cache: one copy of each object generation per node, shared by every process on it.

`NodeCache(dir, limit)` (store.py) is the cache; `cached_cat(fs, info)` (reader.py) reads an object
through `fs.cache`. Modules: limit (size text), entry (names, sidecar), lock (flock), evict (LRU and
accounting), body (checking what a fetch returns), store (fill and lookup), reader (the filesystem's
reads), ranges (byte ranges), objects (`cat_objects`: many small objects), packs and index (where those
live: pack files and their SQLite index). Never imports torch.
"""
from .reader import acached_cat, cached_cat
from .store import NodeCache

__all__ = ["NodeCache", "acached_cat", "cached_cat"]

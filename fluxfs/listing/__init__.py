"""Parallel range listing: one bucket prefix listed by many concurrent `objects.list` calls.

One job per module:

- `keyspace`: key-range maths (pure): where to split a span of keys.
- `lister`: `Lister`, the work-stealing workers paging spans through `fluxfs.gcs.pager`.
- `api`: the entry points `iter_objects`, `list_all` and `find` (gcsfs's `_find`).
- `dircache`: filling gcsfs's dircache from a flat listing, as gcsfs's `_find` does.
- `manifest`: listings saved as JSON lines (or ``key<TAB>label``) and read back.

The names below are the package's public face (`fluxfs.listing.iter_objects`, ...); the
manifest module is imported on use (``fluxfs.listing.manifest``).
"""
from __future__ import annotations

from .api import add_mtimes, find, iter_objects, list_all, split_listing_path
from .dircache import fill_dircache
from .keyspace import Alphabets, KeySpace, choose_split, prefix_end
from .lister import LIST_FIELDS, Lister

__all__ = [
    "LIST_FIELDS", "Alphabets", "KeySpace", "Lister", "add_mtimes", "choose_split",
    "fill_dircache", "find", "iter_objects", "list_all", "prefix_end", "split_listing_path",
]

"""Parallel range listing: one bucket prefix listed by many concurrent `objects.list` calls.

One job per module:

- `keyspace`: key-range maths (pure): where to split a span of keys.
- `lister`: `Lister`, the work-stealing workers paging spans through `fluxfs.gcs.pager`.
- `api`: the entry points `iter_objects`, `list_all` and `find` (gcsfs's `_find`).
- `dircache`: filling gcsfs's dircache from a flat listing, as gcsfs's `_find` does.
- `manifest`: listings saved as JSON lines (or ``key<TAB>label``) and read back.

Users list through the filesystem (`fs.iter_objects`, `fs.find`, `fs.write_manifest`); the one name
exported here is the fields a listing asks for (`LIST_FIELDS`). Our own code imports from the modules.
"""
from __future__ import annotations

from .lister import LIST_FIELDS

__all__ = ["LIST_FIELDS"]

"""The read path: one job per module, each importing only those above it in this list.

* `direct`: one GET and parallel ranged GETs pinned to a generation, crc32c-checked (`cat_file`).
* `into`: `read_into`: byte ranges straight into the caller's buffers.
* `ranges`: `read_ranges` (pinned ranges of one object, `ObjectChanged` when it changes) and `coalesce`.
* `handle`: `FluxReadFile`, the "rb" handle with a prefetch window.
* `plan`: which objects of a batch share a temporary composite (pure).
* `batched`: `cat_objects`: compose, one GET, slice, delete the temporaries; direct reads for the rest.
* `lookup`: metadata for plain paths (listing cache, range listings) and `cat_paths`.
* `stream`: `iter_cat_objects`: a stream of objects read within a memory budget.
* `cached`: the node-local cache's `Fetcher` (the reads above bound to the client) and `cached_cat(fs, info)`.

Nothing is exported here: users read through the filesystem (`cat`, `cat_objects`, `open`, `read_ranges`, ...).
"""

__all__: list[str] = []

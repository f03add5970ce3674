"""Zonal (Rapid) and hierarchical-namespace buckets: each bucket's layout learned once (`layout.py`), zonal
bucket creation (`buckets.py`), HNS folders (`hns.py` over `folders.py`: mkdir, rmdir, mv as one rename, empty
folders in listings), and what changes there (no compose: batched reads go direct, compose writes
go resumable, appends and merges are refused naming the bucket)."""
from . import hns
from .buckets import ZonalBuckets
from .layout import (HNS, STANDARD, ZONAL, BucketLayout, forget, is_zonal, known, layout, layout_sync,
                     refuse_compose, unsupported, without_zonal)

__all__ = ["ZonalBuckets", "hns", "HNS", "STANDARD", "ZONAL", "BucketLayout", "forget", "is_zonal",
           "known", "layout", "layout_sync", "refuse_compose", "unsupported", "without_zonal"]

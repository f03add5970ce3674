"""Zonal (Rapid) and hierarchical-namespace buckets: each bucket's layout learned once (`layout.py`), zonal
bucket creation (`buckets.py`), and what changes there (no compose: batched reads go direct, compose writes
go resumable, appends and merges are refused naming the bucket)."""
from .buckets import ZonalBuckets
from .layout import (HNS, STANDARD, ZONAL, BucketLayout, ZonalUnsupported, is_zonal, known, layout, layout_sync,
                     refuse_compose, unsupported, without_zonal)

__all__ = ["ZonalBuckets", "HNS", "STANDARD", "ZONAL", "BucketLayout", "ZonalUnsupported", "is_zonal", "known",
           "layout", "layout_sync", "refuse_compose", "unsupported", "without_zonal"]

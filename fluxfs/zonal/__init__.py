"""Zonal (Rapid) and hierarchical-namespace buckets: each bucket's layout learned once (`layout.py`), what it
means for reads and writes decided in one place (`transport.py`: HTTP or gRPC, compose and rewrite or not), zonal
bucket creation (`buckets.py`), HNS folders (`hns.py` over `folders.py`: mkdir, rmdir, mv as one rename, empty
folders in listings), gRPC reads and appendable writes (`grpc_*.py`), google-cloud-storage's internals reached in
`gcs_adapter.py` only. Everything else is imported from the module defining it."""
from . import buckets, hns
from .layout import BucketLayout, layout_sync

__all__ = ["BucketLayout", "buckets", "hns", "layout_sync"]

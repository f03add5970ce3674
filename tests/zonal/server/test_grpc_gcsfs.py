"""gcsfs's own ExtendedGcsFileSystem on a zonal bucket of the embedded server: with its bucket-type cache primed it
writes (appendable objects over gRPC) and reads (BidiReadObject) through the server's one URL. Its storage-control
client always opens TLS, which the plaintext server refuses at once: unprimed, the lookup gives up as soon as its
retry budget (`retry_timeout`) allows, and gcsfs falls back to its HTTP file type."""
from __future__ import annotations

import os
import time

import pytest
from fsspec import asyn

from tests.zonal.server.grpcutil import make_bucket

extended = pytest.importorskip("gcsfs.extended_gcsfs")


def _fs(url, **kw):
    return extended.ExtendedGcsFileSystem(endpoint_url=url, token="anon", skip_instance_cache=True, **kw)


def test_primed_extended_gcsfs_round_trips_bytes_on_a_zonal_bucket(srv):
    b = make_bucket(srv.url)
    fs = _fs(srv.url)
    fs._storage_layout_cache[b] = extended.BucketType.ZONAL_HIERARCHICAL  # what a benchmark sets up front
    try:
        data = os.urandom(3 * 1024 * 1024 + 11)
        srv.reset_stats()
        with fs.open(f"{b}/dir/blob.bin", "wb") as f:
            assert type(f).__name__ == "ZonalFile"
            f.write(data)
        assert srv.stats()["bytes_in"] == len(data)  # every byte over gRPC, none twice
        assert fs.info(f"{b}/dir/blob.bin")["size"] == len(data)
        with fs.open(f"{b}/dir/blob.bin", "rb") as f:
            assert f.read() == data
        assert fs.cat_file(f"{b}/dir/blob.bin", start=1000, end=2_500_000) == data[1000:2_500_000]
        assert srv.stats()["data_reads"] >= 2
    finally:
        asyn.sync(fs.loop, fs._close_resources)


def test_unprimed_layout_lookup_fails_fast_over_tls(srv):
    b = make_bucket(srv.url)
    fs = _fs(srv.url, retry_timeout=0.5)
    try:
        t0 = time.monotonic()
        assert fs._sync_lookup_bucket_type(b) == extended.BucketType.UNKNOWN
        assert time.monotonic() - t0 < 5
    finally:
        asyn.sync(fs.loop, fs._close_resources)

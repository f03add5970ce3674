"""A bucket's transport is decided in one place (fluxfs/zonal/transport.py) and reads, writes and appends all take
it: a process that may not use gRPC (forked while its parent's gRPC calls were alive) reads and writes its zonal
buckets over HTTP, as its docs say, instead of its writes building a gRPC channel that cannot work there."""
from __future__ import annotations

import logging
import os

import pytest

from fluxfs.errors import ZonalUnsupported
from fluxfs.zonal import grpc_client
from tests.zonal.conftest import zonal_fs

MiB = 2**20


def test_a_process_without_grpc_reads_writes_and_appends_zonal_buckets_as_over_http(zonal, monkeypatch, caplog):
    server, bucket = zonal
    fs = zonal_fs(server)
    fs.pipe_file(f"{bucket}/before", b"over gRPC")  # the bucket's layout is known
    # What a child forked while a gRPC call stayed alive in its parent is left with (gRPC's core unusable there).
    monkeypatch.setattr(grpc_client._CLIENTS, "grpc_unusable", True)
    monkeypatch.setattr(grpc_client._CLIENTS, "warned", False)
    data = os.urandom(3 * MiB + 5)
    with caplog.at_level(logging.WARNING):
        fs.pipe_file(f"{bucket}/after", data)
        assert fs.cat_file(f"{bucket}/after") == data
        assert fs.cat_file(f"{bucket}/before") == b"over gRPC"
        with pytest.raises(ZonalUnsupported, match=f"append to {bucket}/after: bucket {bucket} is zonal"):
            fs.open(f"{bucket}/after", "ab")  # a native append is gRPC's; the compose one has no compose there
    said = [r.getMessage() for r in caplog.records if "forked while gRPC channels were open" in r.getMessage()]
    assert len(said) == 1, said  # once per process

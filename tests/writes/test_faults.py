"""10% of write requests fail (429/503) or reset: retries make every upload complete, exactly once."""
from __future__ import annotations

import pytest

from tests.conftest import make_fs

from .util import PART_SIZES, payload, write_in_pieces

FAST_RETRY = {"initial": 0.01, "maximum": 0.2, "max_attempts": 12}


@pytest.mark.parametrize("multipart", ["xml", "compose", "resumable"])
def test_ten_percent_write_faults(flux_server, bucket, multipart):
    part = PART_SIZES[multipart]
    fs = make_fs(flux_server, multipart=multipart, part_size=part, write_concurrency=4, retry=FAST_RETRY)
    flux_server.configure(fail_rate=0.1, fail_ops=["write", "compose"], fail_codes=[429, 503], seed=7)
    faults_before = sum(flux_server.stats()["faults"].values())
    datas = {f"{bucket}/o{i}": payload(size, seed=i)
             for i, size in enumerate([1, part + 3, 4 * part + 1, 3 * part])}
    for path, data in datas.items():
        with fs.open(path, "wb") as f:
            write_in_pieces(f, data, piece=200_003)
    fs.pipe_file(f"{bucket}/piped", datas[f"{bucket}/o2"])
    assert sum(flux_server.stats()["faults"].values()) > faults_before  # faults did happen
    flux_server.configure(fail_rate=0.0)
    for path, data in datas.items():
        assert fs.cat_file(path) == data
    assert fs.cat_file(f"{bucket}/piped") == datas[f"{bucket}/o2"]
    assert flux_server.multipart_uploads(bucket) == []
    assert flux_server.list_names(bucket, "_fluxfs-tmp/") == []


def test_connection_resets_on_parts(flux_server, bucket):
    fs = make_fs(flux_server, multipart="compose", part_size=PART_SIZES["compose"], retry=FAST_RETRY)
    flux_server.configure(reset_rate=0.1, fail_ops=["write"], seed=11)
    data = payload(10 * PART_SIZES["compose"] + 1)
    with fs.open(f"{bucket}/o", "wb") as f:
        write_in_pieces(f, data)
    flux_server.configure(reset_rate=0.0)
    assert fs.cat_file(f"{bucket}/o") == data
    assert flux_server.list_names(bucket, "_fluxfs-tmp/") == []

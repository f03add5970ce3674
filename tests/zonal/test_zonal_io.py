"""Reads and writes on a zonal (Rapid) bucket of the embedded server, which refuses compose there as GCS has none:
batched reads go direct (no compose, no warning), compose writes go resumable, appends and merges are refused."""
from __future__ import annotations

import os
import warnings

import pytest

from fluxfs.errors import ZonalUnsupported
from tests.conftest import make_fs, new_bucket_name


@pytest.fixture
def zonal_bucket(flux_server) -> str:
    name = new_bucket_name()
    make_fs(flux_server, zonal_transport="http").mkdir(name, placement="us-central1-a", location="us-central1")
    return name


def _objects(fs, bucket, n=40):
    data = {f"{bucket}/k{i:03d}": os.urandom(100 + i) for i in range(n)}
    fs.pipe(data)
    return data


def test_cat_objects_reads_directly_without_compose_or_warning(flux_server, zonal_bucket):
    fs = make_fs(flux_server, zonal_transport="http")
    data = _objects(fs, zonal_bucket)
    flux_server.reset_stats()  # the layout is learned once, by find (HNS: its folders are listed too)
    infos = list(fs.find(zonal_bucket, detail=True).values())
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # compose-denied's warning would fail the test
        got = fs.cat_objects(infos)
    assert got == data
    requests = flux_server.stats()["requests"]
    assert "compose" not in requests and requests["read"] == len(data) and requests.get("bucket") == 1
    flux_server.reset_stats()
    assert fs.cat_objects(infos) == data
    assert flux_server.stats()["requests"] == {"read": len(data)}  # the layout is not asked again


def test_regional_bucket_still_composes(flux_server, bucket):
    fs = make_fs(flux_server, zonal_transport="http")
    data = _objects(fs, bucket)
    infos = list(fs.find(bucket, detail=True).values())
    flux_server.reset_stats()
    assert fs.cat_objects(infos) == data
    assert flux_server.stats()["requests"].get("compose", 0) >= 1


def test_declared_zonal_reads_directly_without_asking(flux_server, bucket):
    fs = make_fs(flux_server, zonal_transport="http", bucket_types={bucket: "zonal"})
    data = _objects(fs, bucket)
    infos = list(fs.find(bucket, detail=True).values())
    flux_server.reset_stats()
    assert fs.cat_objects(infos) == data
    assert flux_server.stats()["requests"] == {"read": len(data)}


@pytest.mark.parametrize("multipart", ["compose", "xml"])
def test_writes_succeed_without_compose(flux_server, zonal_bucket, multipart):
    fs = make_fs(flux_server, zonal_transport="http", multipart=multipart, part_size="5MiB")
    big, small = os.urandom(12 * 2**20 + 5), os.urandom(1000)
    flux_server.reset_stats()
    with fs.open(f"{zonal_bucket}/big", "wb") as f:
        f.write(big)
    fs.pipe_file(f"{zonal_bucket}/piped", big)
    fs.pipe_file(f"{zonal_bucket}/small", small)
    assert "compose" not in flux_server.stats()["requests"]
    assert fs.cat_file(f"{zonal_bucket}/big") == big and fs.cat_file(f"{zonal_bucket}/piped") == big
    assert fs.cat_file(f"{zonal_bucket}/small") == small
    assert fs.find(zonal_bucket) == [f"{zonal_bucket}/big", f"{zonal_bucket}/piped", f"{zonal_bucket}/small"]


def test_xml_writes_do_not_ask_the_layout(flux_server, zonal_bucket):
    fs = make_fs(flux_server, zonal_transport="http")
    flux_server.reset_stats()
    fs.pipe_file(f"{zonal_bucket}/x", b"abc")
    assert "bucket" not in flux_server.stats()["requests"]


def test_append_on_zonal_bucket_is_refused_naming_it(flux_server, zonal_bucket):
    fs = make_fs(flux_server, zonal_transport="http")
    fs.pipe_file(f"{zonal_bucket}/log", b"first")
    with pytest.raises(ZonalUnsupported, match=f"append to {zonal_bucket}/log: bucket {zonal_bucket} is zonal"):
        fs.open(f"{zonal_bucket}/log", "ab")
    assert fs.cat_file(f"{zonal_bucket}/log") == b"first"
    assert fs.find(zonal_bucket) == [f"{zonal_bucket}/log"]  # no temporary left behind


def test_merge_on_zonal_bucket_is_refused_naming_it(flux_server, zonal_bucket):
    fs = make_fs(flux_server, zonal_transport="http")
    fs.pipe({f"{zonal_bucket}/a": b"1", f"{zonal_bucket}/b": b"2"})
    with pytest.raises(ZonalUnsupported, match=f"merge into {zonal_bucket}/ab: bucket {zonal_bucket} is zonal"):
        fs.merge(f"{zonal_bucket}/ab", [f"{zonal_bucket}/a", f"{zonal_bucket}/b"])
    assert not fs.exists(f"{zonal_bucket}/ab")


def test_xml_fallback_on_zonal_bucket_fails_naming_it_then_writes_resumable(flux_server, zonal_bucket):
    flux_server.configure(xml_multipart=False)
    fs = make_fs(flux_server, zonal_transport="http", part_size="5MiB")
    big = os.urandom(11 * 2**20)
    with pytest.warns(RuntimeWarning, match="does not support XML multipart upload"):
        with pytest.raises(ZonalUnsupported, match=f"{zonal_bucket}/big: the server has no XML multipart upload "
                                                   f"and bucket {zonal_bucket} is zonal"):
            with fs.open(f"{zonal_bucket}/big", "wb") as f:
                f.write(big)
    assert fs.find(zonal_bucket) == []  # nothing half-written, no temporary left
    flux_server.reset_stats()
    with fs.open(f"{zonal_bucket}/big", "wb") as f:
        f.write(big)
    assert fs.cat_file(f"{zonal_bucket}/big") == big
    assert "compose" not in flux_server.stats()["requests"]


def test_reads_that_would_not_compose_do_not_ask_the_layout(flux_server, bucket):
    fs = make_fs(flux_server, zonal_transport="http", compose_threshold=10)  # every object read directly anyway
    data = _objects(fs, bucket, n=5)
    infos = list(fs.find(bucket, detail=True).values())
    flux_server.reset_stats()
    assert fs.cat_objects(infos) == data
    assert flux_server.stats()["requests"] == {"read": 5}

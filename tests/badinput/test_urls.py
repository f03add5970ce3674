"""Bad-input catalogue: malformed URLs, paths and options (docs/bad-inputs.md)."""
from __future__ import annotations

import pytest

from tests.conftest import make_fs

from .conftest import assert_nothing_left


def test_listing_a_url_without_bucket(fs):
    with pytest.raises(ValueError, match=r"cannot list '': no bucket named"):
        fs.find("flux://")


def test_dataset_url_without_bucket(storage_options):
    from fluxfs.pipes import FluxMapDataset

    with pytest.raises(ValueError, match=r"no bucket in 'flux:///images/': expected flux://BUCKET/PREFIX"):
        FluxMapDataset.from_prefix("flux:///images/", storage_options=storage_options)


def test_open_bucket_for_writing(fs, bucket):
    with pytest.raises(ValueError, match=rf"not an object path \(no key after the bucket\): {bucket}"):
        fs.open(f"flux://{bucket}", "wb")


def test_open_bucket_for_reading(fs, bucket):
    with pytest.raises(IsADirectoryError, match=f"cannot open a bucket for reading: {bucket}"):
        fs.open(f"flux://{bucket}", "rb")


def test_open_in_an_unsupported_mode(fs, bucket):
    with pytest.raises(ValueError,
                       match=rf"unsupported mode 'w\+b' for {bucket}/log.txt: use 'rb', 'wb', 'xb' or 'ab'"):
        fs.open(f"{bucket}/log.txt", "w+b")
    assert not fs.exists(f"{bucket}/log.txt")


def test_checkpoint_url_of_another_scheme(storage_options):
    from fluxfs.pipes import FluxCheckpoint

    with pytest.raises(ValueError, match=r"FluxCheckpoint handles flux://bucket/key URLs, not 's3://b/model.pt'"):
        FluxCheckpoint(**storage_options).save({}, "s3://b/model.pt")


def test_checkpoint_url_without_object_name(storage_options, bucket):
    from fluxfs.pipes import FluxCheckpoint

    with pytest.raises(ValueError, match="checkpoint URL needs a bucket and an object name"):
        FluxCheckpoint(**storage_options).save({}, f"flux://{bucket}")


def test_read_range_past_the_end(fs, bucket):
    fs.pipe(f"{bucket}/ten", b"0123456789")
    with pytest.raises(ValueError, match=f"Requested range 100-200 not satisfiable for {bucket}/ten"):
        fs.cat_file(f"{bucket}/ten", start=100, end=200)


def test_object_info_without_key(fs, bucket):
    with pytest.raises(ValueError, match=f"object info needs a name 'bucket/key', got '{bucket}'"):
        fs.cat_objects([{"name": bucket, "size": 3}])


@pytest.mark.parametrize("option,value,message", [
    ("multipart", "bogus", r"multipart must be 'xml', 'compose' or 'resumable', not 'bogus'"),
    ("list_page_size", 5000, r"list_page_size must be between 1 and 1000 \(GCS's cap\), not 5000"),
    ("retry", {"lists": {"max_attempts": 2}}, r"unknown operation kinds in retry option: \['lists'\]"),
], ids=["multipart", "list_page_size", "retry"])
def test_invalid_filesystem_option(flux_server, option, value, message):
    with pytest.raises(ValueError, match=message):
        make_fs(flux_server, **{option: value})


def test_xml_part_size_below_minimum(flux_server, bucket):
    fs = make_fs(flux_server, part_size=1024)
    with pytest.raises(ValueError,
                       match=r"part_size 1024 is below the 5 MiB \(5242880\) minimum .*multipart='compose'"):
        fs.pipe_file(f"{bucket}/x", b"data")
    assert flux_server.list_names(bucket) == []
    assert_nothing_left(flux_server, bucket)


def test_object_name_longer_than_1024_bytes(fs, flux_server, bucket):
    from fluxfs.errors import HttpError

    with pytest.raises(HttpError, match="HTTP 400: .*Object name is longer than 1024 bytes"):
        fs.pipe_file(f"{bucket}/" + "é" * 513, b"data")  # 1,026 bytes of UTF-8
    assert flux_server.list_names(bucket) == []
    assert_nothing_left(flux_server, bucket)

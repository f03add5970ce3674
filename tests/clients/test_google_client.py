"""Google's own google-cloud-storage client works unchanged against the servers."""
from __future__ import annotations

import base64
import os

import google_crc32c
import pytest
from google.api_core import exceptions
from google.cloud.storage import transfer_manager

MIB = 1024 * 1024


def crc32c_b64(data: bytes) -> str:
    return base64.b64encode(google_crc32c.Checksum(data).digest()).decode()


def test_upload_download_small_and_resumable(gclient, any_bucket):
    bucket = gclient.bucket(any_bucket)
    small = os.urandom(1000)
    bucket.blob("small").upload_from_string(small)
    assert bucket.blob("small").download_as_bytes() == small
    # A chunk_size makes the client use a resumable upload in 256 KiB multiples.
    big = os.urandom(600 * 1024)
    blob = bucket.blob("resumable", chunk_size=256 * 1024)
    blob.upload_from_string(big, checksum="crc32c")
    fetched = bucket.get_blob("resumable")
    assert fetched.size == len(big) and fetched.crc32c == crc32c_b64(big)
    assert fetched.download_as_bytes(checksum="crc32c") == big
    assert bucket.blob("resumable").download_as_bytes(start=100, end=199) == big[100:200]


def test_list_and_delete(gclient, any_bucket):
    bucket = gclient.bucket(any_bucket)
    for i in range(7):
        bucket.blob(f"l/{i}").upload_from_string(str(i))
    names = [b.name for b in gclient.list_blobs(any_bucket, prefix="l/", max_results=100, page_size=3)]
    assert names == [f"l/{i}" for i in range(7)]
    bucket.blob("l/3").delete()
    with pytest.raises(exceptions.NotFound):
        bucket.blob("l/3").download_as_bytes()
    assert len(list(gclient.list_blobs(any_bucket, prefix="l/"))) == 6


def test_compose(gclient, any_bucket):
    bucket = gclient.bucket(any_bucket)
    parts = [os.urandom(100 + i) for i in range(5)]
    blobs = []
    for i, p in enumerate(parts):
        b = bucket.blob(f"c/{i}")
        b.upload_from_string(p)
        blobs.append(b)
    dest = bucket.blob("c/all")
    dest.compose(blobs)
    whole = b"".join(parts)
    assert dest.download_as_bytes() == whole
    assert bucket.get_blob("c/all").crc32c == crc32c_b64(whole)


def test_compose_component_count(flux_client, bucket):
    """GCS sets componentCount on composites; fake-gcs-server does not, so fluxfs server only."""
    b = flux_client.bucket(bucket)
    b.blob("a").upload_from_string(b"a")
    b.blob("b").upload_from_string(b"b")
    dest = b.blob("ab")
    dest.compose([b.blob("a"), b.blob("b")])
    got = b.get_blob("ab")
    assert got.component_count == 2 and got.md5_hash is None


def test_preconditions_through_client(flux_client, bucket):
    b = flux_client.bucket(bucket)
    b.blob("p").upload_from_string(b"1", if_generation_match=0)
    with pytest.raises(exceptions.PreconditionFailed):
        b.blob("p").upload_from_string(b"2", if_generation_match=0)
    assert b.blob("p").download_as_bytes() == b"1"


def test_download_chunks_concurrently(gclient, any_bucket, tmp_path):
    data = os.urandom(3 * MIB + 17)
    blob = gclient.bucket(any_bucket).blob("dl/big")
    blob.upload_from_string(data)
    target = tmp_path / "big.bin"
    transfer_manager.download_chunks_concurrently(
        gclient.bucket(any_bucket).get_blob("dl/big"), str(target), chunk_size=MIB,
        worker_type=transfer_manager.THREAD, max_workers=4, crc32c_checksum=True)
    assert target.read_bytes() == data


def test_upload_chunks_concurrently(flux_client, bucket, tmp_path):
    """XML multipart upload through the client's transfer manager (fluxfs server only: fake-gcs-server has no
    XML multipart). Parts of 5 MiB, the minimum GCS allows for all but the last part."""
    data = os.urandom(11 * MIB + 5)
    src = tmp_path / "up.bin"
    src.write_bytes(data)
    blob = flux_client.bucket(bucket).blob("up/big.bin")
    transfer_manager.upload_chunks_concurrently(
        str(src), blob, chunk_size=5 * MIB, worker_type=transfer_manager.THREAD, max_workers=3)
    got = flux_client.bucket(bucket).get_blob("up/big.bin")
    assert got.size == len(data) and got.crc32c == crc32c_b64(data)
    assert got.download_as_bytes() == data
    assert [b.name for b in flux_client.list_blobs(bucket)] == ["up/big.bin"]  # no stray parts or temporaries

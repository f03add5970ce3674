"""Bytes written through fs.open(..., "wb") come back exactly, for every strategy and both servers."""
from __future__ import annotations

import pytest

from tests.conftest import make_fs

from .util import COMPOSE_PART, OFF_PART, XML_PART, payload, temp_leftovers, write_in_pieces


def sizes(part: int) -> list[int]:
    return [0, 1, part - 1, part, part + 1, 10 * part]


@pytest.mark.parametrize("size", sizes(COMPOSE_PART))
def test_compose_round_trip(gcs_server, any_bucket, size):
    fs = make_fs(gcs_server, multipart="compose", part_size=COMPOSE_PART, write_concurrency=4)
    data = payload(size, seed=size)
    path = f"{any_bucket}/dir/ckpt.bin"
    with fs.open(path, "wb") as f:
        write_in_pieces(f, data)
        assert f.tell() == size
    assert f.object_info["size"] == size
    assert fs.cat_file(path) == data
    assert fs.info(path)["size"] == size
    assert temp_leftovers(gcs_server, any_bucket) == []


@pytest.mark.parametrize("size", sizes(XML_PART))
def test_xml_round_trip(flux_server, bucket, size):
    fs = make_fs(flux_server, multipart="xml", part_size=XML_PART, write_concurrency=4)
    data = payload(size, seed=size)
    path = f"{bucket}/ckpt.bin"
    with fs.open(path, "wb") as f:
        write_in_pieces(f, data, piece=1_000_003)
    assert fs.cat_file(path) == data
    assert f.object_info["crc32c"] == fs.info(path)["crc32c"]
    assert flux_server.multipart_uploads(bucket) == []


@pytest.mark.parametrize("size", [0, 1, OFF_PART, 3 * OFF_PART + 5])
def test_resumable_round_trip(flux_server, bucket, size):
    fs = make_fs(flux_server, multipart="resumable", part_size=OFF_PART)
    data = payload(size, seed=size)
    with fs.open(f"{bucket}/o", "wb") as f:
        write_in_pieces(f, data)
    assert fs.cat_file(f"{bucket}/o") == data


def test_small_write_is_one_request(flux_server, bucket):
    fs = make_fs(flux_server, multipart="xml", part_size=XML_PART)
    fs.pipe_file(f"{bucket}/warm", b"x")  # session set up outside the count
    before = flux_server.stats()["requests"].get("write", 0)
    with fs.open(f"{bucket}/small", "wb") as f:
        write_in_pieces(f, payload(XML_PART - 1), piece=65_536)
    assert flux_server.stats()["requests"].get("write", 0) - before == 1
    assert flux_server.multipart_uploads(bucket) == []


def test_caller_may_reuse_its_buffer_after_write(flux_server, bucket):
    """write() must copy what it keeps: torch hands out views of tensor memory."""
    fs = make_fs(flux_server, multipart="compose", part_size=COMPOSE_PART)
    buf = bytearray(payload(3 * COMPOSE_PART + 7))
    expected = bytes(buf)
    with fs.open(f"{bucket}/o", "wb") as f:
        f.write(buf)
        buf[:] = bytes(len(buf))  # scribble over it while parts may still be in flight
        f.write(memoryview(buf)[:0])
    assert fs.cat_file(f"{bucket}/o") == expected


def test_content_type_and_metadata(flux_server, bucket):
    fs = make_fs(flux_server, multipart="xml", part_size=XML_PART)
    data = payload(XML_PART + 10)
    with fs.open(f"{bucket}/o", "wb", content_type="application/x-torch", metadata={"step": "7"}) as f:
        f.write(data)
    info = fs.info(f"{bucket}/o")
    assert info["contentType"] == "application/x-torch"
    assert info["metadata"] == {"step": "7"}


@pytest.mark.parametrize("multipart", ["xml", "compose"])
def test_pipe_and_put_file_use_the_parallel_uploader(flux_server, bucket, tmp_path, multipart):
    part = XML_PART if multipart == "xml" else COMPOSE_PART
    fs = make_fs(flux_server, multipart=multipart, part_size=part)
    data = payload(3 * part + 11)
    before = flux_server.stats()["requests"].get("write", 0)
    fs.pipe_file(f"{bucket}/piped", data)
    assert flux_server.stats()["requests"].get("write", 0) - before >= 4  # parts, not one request
    assert fs.cat_file(f"{bucket}/piped") == data
    local = tmp_path / "local.bin"
    local.write_bytes(data[::-1])
    fs.put_file(str(local), f"{bucket}/put")
    assert fs.cat_file(f"{bucket}/put") == data[::-1]
    assert flux_server.multipart_uploads(bucket) == []
    assert temp_leftovers(flux_server, bucket) == []


@pytest.mark.parametrize("multipart", ["xml", "compose"])
def test_google_client_validates_the_written_object(flux_server, bucket, multipart):
    """The object (composite or multipart) carries a crc32c that google-cloud-storage verifies."""
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    part = XML_PART if multipart == "xml" else COMPOSE_PART
    fs = make_fs(flux_server, multipart=multipart, part_size=part)
    data = payload(4 * part + 3)
    with fs.open(f"{bucket}/o", "wb") as f:
        write_in_pieces(f, data)
    client = storage.Client(project="test", credentials=AnonymousCredentials(),
                            client_options={"api_endpoint": flux_server.url})
    assert client.bucket(bucket).blob("o").download_as_bytes(checksum="crc32c") == data


def test_compose_tree_of_more_than_32_parts(gcs_server, any_bucket):
    fs = make_fs(gcs_server, multipart="compose", part_size=4 * 1024, write_concurrency=8)
    data = payload(70 * 4 * 1024 + 1)  # 71 parts: two levels of composition
    with fs.open(f"{any_bucket}/o", "wb") as f:
        write_in_pieces(f, data, piece=10_000)
    assert fs.cat_file(f"{any_bucket}/o") == data
    assert temp_leftovers(gcs_server, any_bucket) == []


def test_bad_options_are_clear_errors(flux_server, bucket):
    with pytest.raises(ValueError, match="5 MiB"):
        make_fs(flux_server, multipart="xml", part_size=1024).open(f"{bucket}/o", "wb")
    with pytest.raises(ValueError, match="256 KiB"):
        make_fs(flux_server, multipart="resumable", part_size=1000).open(f"{bucket}/o", "wb")
    with pytest.raises(ValueError, match="not an object path"):
        make_fs(flux_server).open(bucket, "wb")
    with pytest.raises(TypeError, match="bogus"):
        make_fs(flux_server).open(f"{bucket}/o", "wb", bogus=1)
    assert not make_fs(flux_server).exists(f"{bucket}/o")


def test_text_mode_through_fsspec(flux_server, bucket):
    fs = make_fs(flux_server, multipart="compose", part_size=COMPOSE_PART)
    text = "checkpoint → ünïcode\n" * 20_000  # spans several parts
    with fs.open(f"{bucket}/notes.txt", "w", encoding="utf-8") as f:
        f.write(text)
    assert fs.cat_file(f"{bucket}/notes.txt").decode("utf-8") == text


def test_xml_object_has_crc32c_and_no_md5(flux_server, bucket):
    """As on GCS, an object assembled by an XML multipart upload has a crc32c but never an MD5
    (neither in its metadata nor in the x-goog-hash of a download)."""
    import urllib.request

    fs = make_fs(flux_server, multipart="xml", part_size=XML_PART)
    data = payload(2 * XML_PART + 7)
    with fs.open(f"{bucket}/o", "wb") as f:
        write_in_pieces(f, data, piece=1_000_003)
    assert fs.cat_file(f"{bucket}/o") == data
    info = fs.info(f"{bucket}/o")
    assert info["crc32c"] == f.object_info["crc32c"] and "md5Hash" not in info
    with urllib.request.urlopen(f"{flux_server.url}/{bucket}/o", timeout=30) as r:
        assert r.read() == data
        assert r.headers["x-goog-hash"] == f"crc32c={info['crc32c']}"


def test_refused_initiate_is_a_clear_error(flux_server, bucket):
    """The upload starts in the background; a refused start still surfaces from write/close."""
    fs = make_fs(flux_server, multipart="xml", part_size=XML_PART)
    flux_server.configure(deny_ops=["write"])
    with pytest.raises(PermissionError):
        with fs.open(f"{bucket}/o", "wb") as f:
            write_in_pieces(f, payload(3 * XML_PART), piece=XML_PART)
    flux_server.configure(deny_ops=[])
    assert not fs.exists(f"{bucket}/o")
    assert flux_server.multipart_uploads(bucket) == []

"""gcsfs's write behaviour on every strategy: stored fields (metadata, content type, fixed-key
metadata, KMS key), content type guessing, small block sizes, wrong-mode errors, generation, "xb"."""
from __future__ import annotations

import io

import pytest

from tests.conftest import make_fs

from .util import MiB, PART_SIZES, payload

STRATEGIES = ["xml", "compose", "resumable"]
KMS = "projects/p/locations/us/keyRings/r/cryptoKeys/k"
FIXED = {"cache_control": "public, max-age=3600", "content_disposition": "attachment; filename=a.csv",
         "content_encoding": "gzip", "content_language": "en", "custom_time": "2021-10-21T17:00:00Z"}
STORED_FIXED = {"cacheControl": "public, max-age=3600", "contentDisposition": "attachment; filename=a.csv",
                "contentEncoding": "gzip", "contentLanguage": "en", "customTime": "2021-10-21T17:00:00Z"}


def strategy_fs(server, multipart, **kw):
    return make_fs(server, multipart=multipart, part_size=PART_SIZES[multipart], **kw)


def sizes(multipart):
    return [3, 2 * PART_SIZES[multipart] + 5]  # one request; several parts


def assert_fields(info, content_type, metadata, kms=True):
    assert info["contentType"] == content_type
    assert info.get("metadata") == metadata
    for k, v in STORED_FIXED.items():
        assert info[k] == v, k
    if kms:
        assert info["kmsKeyName"] == KMS


@pytest.mark.parametrize("multipart", STRATEGIES)
@pytest.mark.parametrize("big", [False, True])
def test_open_arguments_are_stored(flux_server, bucket, multipart, big):
    fs = strategy_fs(flux_server, multipart)
    data = payload(sizes(multipart)[big], seed=1)
    path = f"{bucket}/d/a.bin"
    with fs.open(path, "wb", content_type="text/csv", metadata={"k": "v", "n": 1},
                 fixed_key_metadata=FIXED, kms_key_name=KMS) as f:
        f.write(data)
    assert fs.cat_file(path) == data
    fs.invalidate_cache()
    assert_fields(fs.info(path), "text/csv", {"k": "v", "n": "1"})


@pytest.mark.parametrize("multipart", STRATEGIES)
@pytest.mark.parametrize("big", [False, True])
def test_metadata_attribute_set_inside_with(flux_server, bucket, multipart, big):
    fs = strategy_fs(flux_server, multipart)
    data = payload(sizes(multipart)[big], seed=2)
    path = f"{bucket}/a.txt"
    with fs.open(path, "wb") as f:
        f.metadata = {"something": "not"}
        f.metadata["more"] = "yes"  # the dict itself is read when the upload starts
        f.fixed_key_metadata = {"cache_control": "no-cache"}
        assert f.content_type == "text/plain"
        f.write(data)
    fs.invalidate_cache()
    info = fs.info(path)
    assert info["metadata"] == {"something": "not", "more": "yes"}
    assert info["cacheControl"] == "no-cache"
    assert info["contentType"] == "text/plain"
    assert fs.getxattr(path, "something") == "not"


@pytest.mark.parametrize("multipart", STRATEGIES)
@pytest.mark.parametrize("big", [False, True])
def test_pipe_and_put_store_fields(flux_server, bucket, multipart, big, tmp_path):
    fs = strategy_fs(flux_server, multipart)
    data = payload(sizes(multipart)[big], seed=3)
    fs.pipe_file(f"{bucket}/p", data, content_type="text/csv", metadata={"k": "v"}, fixed_key_metadata=FIXED,
                 kms_key_name=KMS)
    local = tmp_path / "x.txt"
    local.write_bytes(data)
    fs.put_file(str(local), f"{bucket}/q", metadata={"k": "w"}, fixed_key_metadata=FIXED, kms_key_name=KMS)
    fs.invalidate_cache()
    assert_fields(fs.info(f"{bucket}/p"), "text/csv", {"k": "v"})
    assert_fields(fs.info(f"{bucket}/q"), "text/plain", {"k": "w"})  # guessed from the local name
    assert fs.cat_file(f"{bucket}/q") == data


@pytest.mark.parametrize("multipart", STRATEGIES)
def test_content_type_guessed_from_the_key(flux_server, bucket, multipart):
    fs = strategy_fs(flux_server, multipart)
    with fs.open(f"{bucket}/a.txt", "wb") as f:
        f.write(b"zz")
    with fs.open(f"{bucket}/a.abcdef", "wb") as f:
        f.write(b"zz")
    fs.pipe_file(f"{bucket}/b.json", b"{}")
    fs.pipe_file(f"{bucket}/big.txt", payload(2 * PART_SIZES[multipart] + 1, seed=4))
    fs.invalidate_cache()
    assert fs.info(f"{bucket}/a.txt")["contentType"] == "text/plain"
    assert fs.info(f"{bucket}/a.abcdef")["contentType"] == "application/octet-stream"
    assert fs.info(f"{bucket}/b.json")["contentType"] == "application/json"
    assert fs.info(f"{bucket}/big.txt")["contentType"] == "text/plain"


def test_xml_carries_what_headers_cannot_through_json(flux_server, bucket):
    # Non-ASCII values and upper-case keys do not survive HTTP headers: such a write goes through
    # one resumable session, and the fields arrive unchanged.
    fs = strategy_fs(flux_server, "xml")
    data = payload(2 * PART_SIZES["xml"] + 5, seed=5)
    md = {"Owner": "Zoë", "plain": "x"}
    with fs.open(f"{bucket}/u", "wb", metadata=md) as f:
        f.write(data)
    fs.invalidate_cache()
    assert fs.info(f"{bucket}/u")["metadata"] == md
    assert fs.cat_file(f"{bucket}/u") == data
    assert flux_server.multipart_uploads(bucket) == []


def test_metadata_change_after_the_upload_started_is_refused(flux_server, bucket):
    fs = strategy_fs(flux_server, "xml")
    with pytest.raises(ValueError, match="metadata can no longer change"):
        with fs.open(f"{bucket}/late", "wb") as f:
            f.write(payload(PART_SIZES["xml"] + 1, seed=6))
            f.metadata = {"k": "v"}
    assert not fs.exists(f"{bucket}/late")
    assert flux_server.multipart_uploads(bucket) == []


@pytest.mark.parametrize("multipart,block_size,part", [("xml", 2**18, 5 * MiB), ("resumable", 300_000, 512 * 1024),
                                                       ("compose", 2**18, 2**18)])
def test_small_block_size_is_rounded_up(flux_server, bucket, multipart, block_size, part):
    fs = strategy_fs(flux_server, multipart)
    data = payload(2 * part + 7, seed=7)
    with fs.open(f"{bucket}/blk.txt", "wb", content_type="text/plain", block_size=block_size) as f:
        assert f.part_size == part
        for i in range(0, len(data), 100_000):
            f.write(data[i:i + 100_000])
    assert fs.cat_file(f"{bucket}/blk.txt") == data
    assert fs.info(f"{bucket}/blk.txt")["contentType"] == "text/plain"


def test_small_part_size_option_still_fails_at_open(flux_server, bucket):
    with pytest.raises(ValueError, match="below the 5 MiB"):
        make_fs(flux_server, multipart="xml", part_size=2**18).open(f"{bucket}/o", "wb")


def test_wrong_mode_calls_raise_like_io(fs, bucket):
    f = fs.open(f"{bucket}/w", "wb")
    with pytest.raises(io.UnsupportedOperation):
        f.read()
    with pytest.raises(io.UnsupportedOperation):
        f.seek(0)
    f.write(b"hello")
    f.flush(force=True)  # fsspec's signature
    f.flush()
    f.close()
    with pytest.raises(ValueError, match="I/O operation on closed file"):
        f.write(b"world")
    with pytest.raises(ValueError, match="I/O operation on closed file"):
        f.flush()
    assert fs.cat_file(f"{bucket}/w") == b"hello"


@pytest.mark.parametrize("multipart", STRATEGIES)
@pytest.mark.parametrize("big", [False, True])
def test_generation_after_close(flux_server, bucket, multipart, big):
    fs = strategy_fs(flux_server, multipart)
    with fs.open(f"{bucket}/g", "wb") as f:
        assert f.generation is None
        f.write(payload(sizes(multipart)[big], seed=8))
    assert f.generation is not None
    assert f.generation == fs.info(f"{bucket}/g")["generation"]
    assert f"generation={f.generation}" in f.url()


@pytest.mark.parametrize("multipart", STRATEGIES)
def test_xb_on_an_existing_object_fails_at_open(flux_server, bucket, multipart):
    fs = strategy_fs(flux_server, multipart)
    fs.pipe_file(f"{bucket}/x", b"first")
    with pytest.raises(FileExistsError, match="already exists"):
        fs.open(f"{bucket}/x", "xb")
    assert fs.cat_file(f"{bucket}/x") == b"first"
    # The race: created by someone else between open and close -> the commit's precondition refuses.
    f = fs.open(f"{bucket}/y", "xb")
    f.write(b"mine")
    fs.pipe_file(f"{bucket}/y", b"theirs")
    with pytest.raises(FileExistsError):
        f.close()
    assert fs.cat_file(f"{bucket}/y") == b"theirs"


def test_pipe_file_invalidates_only_the_cached_parent(fs, bucket):
    fs.pipe_file(f"{bucket}/base/parent/old.txt", b"x")
    fs.pipe_file(f"{bucket}/base/sibling/s.txt", b"x")
    for d in ("base", "base/parent", "base/sibling"):
        fs.ls(f"{bucket}/{d}")
    fs.pipe_file(f"{bucket}/base/parent/new.txt", b"hello")
    assert f"{bucket}/base/parent" not in fs.dircache
    assert f"{bucket}/base" in fs.dircache and f"{bucket}/base/sibling" in fs.dircache
    assert f"{bucket}/base/parent/new.txt" in fs.ls(f"{bucket}/base/parent")

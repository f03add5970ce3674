"""Bad-input catalogue: gcsfs's write options with values fluxfs cannot store (docs/bad-inputs.md)."""
from __future__ import annotations

import io

import pytest

from tests.conftest import make_fs

from .conftest import assert_nothing_left


def test_unsupported_fixed_key_metadata_key(fs, flux_server, bucket):
    with pytest.raises(ValueError,
                       match=r"fixed_key_metadata: unsupported key 'colour'; supported: content_encoding, "):
        fs.open(f"{bucket}/a", "wb", fixed_key_metadata={"colour": "red"})
    assert flux_server.list_names(bucket) == []


def test_metadata_not_a_dict(fs, flux_server, bucket):
    with pytest.raises(TypeError, match="metadata must be a dict of strings, not str"):
        with fs.open(f"{bucket}/a", "wb") as f:
            f.write(b"data")
            f.metadata = "k=v"
    assert flux_server.list_names(bucket) == []
    assert_nothing_left(flux_server, bucket)


def test_unknown_pipe_file_argument(fs, flux_server, bucket):
    with pytest.raises(TypeError, match=r"pipe_file\(.*/a\): unexpected arguments \['colour'\]"):
        fs.pipe_file(f"{bucket}/a", b"x", colour="red")
    assert flux_server.list_names(bucket) == []


def test_acl_on_open(fs, flux_server, bucket):
    with pytest.raises(ValueError, match=r"open\(acl='publicRead'\) is not supported by fluxfs writes"):
        fs.open(f"{bucket}/a", "wb", acl="publicRead")
    assert flux_server.list_names(bucket) == []


def test_metadata_changed_after_the_upload_started(flux_server, bucket):
    fs = make_fs(flux_server, multipart="xml")
    with pytest.raises(ValueError, match=r".*/late: metadata can no longer change, the upload started after "
                                         r"\d+ bytes; set it before writing"):
        with fs.open(f"{bucket}/late", "wb") as f:
            f.write(b"x" * (fs.options.part_size + 1))
            f.metadata = {"k": "v"}
    assert flux_server.list_names(bucket) == []
    assert_nothing_left(flux_server, bucket)


def test_read_on_a_write_handle(fs, flux_server, bucket):
    with pytest.raises(io.UnsupportedOperation, match="read: .*/w is open for writing"):
        with fs.open(f"{bucket}/w", "wb") as f:
            f.read()
    assert flux_server.list_names(bucket) == []


def test_write_after_close(fs, bucket):
    f = fs.open(f"{bucket}/w", "wb")
    f.close()
    with pytest.raises(ValueError, match="I/O operation on closed file .*/w"):
        f.write(b"late")
    assert fs.cat_file(f"{bucket}/w") == b""


def test_exclusive_create_of_an_existing_object(fs, bucket):
    fs.pipe_file(f"{bucket}/x", b"first")
    with pytest.raises(FileExistsError, match=r"/x already exists \(mode 'xb' creates only new objects\)"):
        fs.open(f"{bucket}/x", "xb")
    assert fs.cat_file(f"{bucket}/x") == b"first"

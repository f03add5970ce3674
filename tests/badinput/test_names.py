"""Bad-input catalogue: awkward object names and zero-byte objects round-trip exactly (docs/bad-inputs.md).

Each name is written twice (fs.pipe_file and a "wb" handle), listed (find and the parallel
lister), and read back by every read path (cat_file, a read handle, fs.cat and the compose-backed
batched read, which composes the two copies into one temporary object and slices them apart).
"""
from __future__ import annotations

import pytest

from .conftest import assert_nothing_left

NAMES = {
    "unicode": "données/ünïcødé-日本語-😀.bin",
    "spaces": "with space/a b  c.txt",
    "hash": "run#3/ckpt#final",
    "question": "what?x=1&y=2",
    "percent": "100%25 done%/%2F%",
    "long_1024_bytes": "long/" + "x" * (1024 - len("long/") - len(".1")),  # 1,024 bytes with the suffix
}


@pytest.mark.parametrize("label", list(NAMES))
def test_awkward_key_round_trip(fs, flux_server, bucket, label):
    key = NAMES[label]
    data = f"content of {label}".encode() * 20
    first, second = f"{bucket}/{key}.1", f"{bucket}/{key}.2"
    fs.pipe_file(first, data)
    with fs.open(second, "wb") as f:
        f.write(data[::-1])
    assert len((key + ".1").encode()) <= 1024
    assert sorted(flux_server.list_names(bucket)) == sorted([key + ".1", key + ".2"])
    assert fs.find(bucket) == sorted([first, second])
    assert sorted(i["name"] for b in fs.iter_objects(bucket) for i in b) == sorted([first, second])
    assert fs.cat_file(first) == data
    with fs.open(second, "rb") as f:
        assert f.read() == data[::-1]
    assert fs.cat([first, second]) == {first: data, second: data[::-1]}
    infos = [i for b in fs.iter_objects(bucket) for i in b]
    assert fs.cat_objects(infos) == {first: data, second: data[::-1]}
    assert_nothing_left(flux_server, bucket)


def test_zero_byte_objects(fs, flux_server, bucket, storage_options):
    from fluxfs.pipes import FluxMapDataset

    fs.pipe_file(f"{bucket}/z/a", b"")
    with fs.open(f"{bucket}/z/b", "wb"):
        pass
    fs.pipe_file(f"{bucket}/z/c", b"not empty")
    assert fs.info(f"{bucket}/z/b")["size"] == 0
    assert fs.cat_file(f"{bucket}/z/a") == b""
    with fs.open(f"{bucket}/z/b", "rb") as f:
        assert f.read() == b""
    infos = [i for b in fs.iter_objects(f"{bucket}/z") for i in b]
    assert fs.cat_objects(infos) == {f"{bucket}/z/a": b"", f"{bucket}/z/b": b"", f"{bucket}/z/c": b"not empty"}
    ds = FluxMapDataset.from_prefix(f"flux://{bucket}/z/", storage_options=storage_options)
    assert [ds[i] for i in range(3)] == [("z/a", b""), ("z/b", b""), ("z/c", b"not empty")]
    assert_nothing_left(flux_server, bucket)


def test_carriage_return_in_a_key(fs, flux_server, bucket):
    from fluxfs.errors import HttpError

    # GCS forbids CR in object names; the error quotes the name with the CR visible.
    with pytest.raises(HttpError, match=r"(?s)HTTP 400: .*Invalid object name: 'dos\\r\\nline'"):
        fs.pipe_file(f"{bucket}/dos\r\nline", b"data")
    assert flux_server.list_names(bucket) == []
    assert_nothing_left(flux_server, bucket)


@pytest.mark.parametrize("how", ["pipe_file", "wb"])
def test_line_feed_in_a_key(fs, flux_server, bucket, how):
    from fluxfs.errors import HttpError

    # GCS forbids LF in object names too; refused by every upload path, nothing left behind.
    with pytest.raises(HttpError, match=r"(?s)HTTP 400: .*Invalid object name: 'line1\\nline2'"):
        if how == "pipe_file":
            fs.pipe_file(f"{bucket}/line1\nline2", b"data")
        else:
            with fs.open(f"{bucket}/line1\nline2", "wb") as f:
                f.write(b"data")
    assert flux_server.list_names(bucket) == []
    assert_nothing_left(flux_server, bucket)

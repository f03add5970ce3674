"""Bad-input catalogue: well-formed answers from servers we did not write (docs/bad-inputs.md).

The embedded server imitates them on demand: ``omit_zero_fields`` (0-byte objects listed and described
without ``size``), ``error_style`` (error bodies without ``errors[]``/``reason``, with a JSON-encoded
``message``, or plain text) and ``lose_replies`` (a request carried out whose answer never arrives).
"""
from __future__ import annotations

import pytest

from tests.conftest import make_fs

from .conftest import assert_nothing_left

FAST_RETRY = {"initial": 0.01, "maximum": 0.05}


@pytest.fixture
def zero_byte_objects(fs, flux_server, bucket):
    """z/a and z/b empty, z/c not, on a server that leaves zero-valued fields out of its answers."""
    flux_server.configure(omit_zero_fields=True)
    fs.pipe_file(f"{bucket}/z/a", b"")
    with fs.open(f"{bucket}/z/b", "wb"):
        pass
    fs.pipe_file(f"{bucket}/z/c", b"not empty")
    return [f"{bucket}/z/{k}" for k in "abc"]


def test_the_server_really_omits_size(flux_server, bucket, zero_byte_objects):
    from tests.conformance.wire import Wire

    wire = Wire(flux_server.url)
    items = wire.list(bucket, prefix="z/").json()["items"]
    assert [("size" in i, i["name"]) for i in items] == [(False, "z/a"), (False, "z/b"), (True, "z/c")]
    assert "size" not in wire.get_meta(bucket, "z/a").json()


def test_find_du_ls_info_on_objects_without_size(fs, bucket, zero_byte_objects):
    a, b, c = zero_byte_objects
    infos = fs.find(f"{bucket}/z/", detail=True)
    assert {p: i["size"] for p, i in infos.items()} == {a: 0, b: 0, c: 9}
    assert infos[a]["generation"] and infos[a]["crc32c"] == "AAAAAA=="
    assert fs.du(f"{bucket}/z/") == 9
    assert fs.du(f"{bucket}/z/", total=False) == {a: 0, b: 0, c: 9}
    fs.invalidate_cache()
    assert [i["size"] for i in fs.ls(f"{bucket}/z/", detail=True)] == [0, 0, 9]
    fs.invalidate_cache()
    assert fs.info(a)["size"] == 0 and fs.size(b) == 0
    assert [i["size"] for batch in fs.iter_objects(f"{bucket}/z") for i in batch] == [0, 0, 9]


def test_reads_of_objects_without_size(fs, flux_server, bucket, zero_byte_objects):
    a, b, c = zero_byte_objects
    expected = {a: b"", b: b"", c: b"not empty"}
    fs.invalidate_cache()
    assert fs.cat([a, b, c]) == expected          # range listings look the sizes up
    assert fs.cat(f"{bucket}/z", recursive=True) == expected
    assert fs.cat_file(a) == b""
    with fs.open(b, "rb") as f:
        assert f.read() == b""
    infos = [i for batch in fs.iter_objects(f"{bucket}/z") for i in batch]
    assert fs.cat_objects(infos) == expected      # composed: the composite of two 0-byte objects has no size either
    assert fs.cat_objects(infos[:2]) == {a: b"", b: b""}
    assert_nothing_left(flux_server, bucket)


def test_datasets_and_nodes_over_objects_without_size(flux_server, bucket, zero_byte_objects, storage_options):
    from fluxfs.pipes import FluxIterableDataset, FluxMapDataset, ListObjects, ReadObjects

    url = f"flux://{bucket}/z/"
    want = [("z/a", b""), ("z/b", b""), ("z/c", b"not empty")]
    ds = FluxMapDataset.from_prefix(url, storage_options=storage_options)
    assert [ds[i] for i in range(3)] == want
    assert list(FluxIterableDataset.from_prefix(url, storage_options=storage_options)) == want
    node = ReadObjects(ListObjects(url, storage_options=storage_options), storage_options=storage_options)
    assert list(node) == want
    assert_nothing_left(flux_server, bucket)


@pytest.mark.parametrize("style", ["bare", "nested", "text"])
def test_error_bodies_of_other_shapes_give_one_line_messages(flux_server, fs, bucket, style):
    fs.pipe_file(f"{bucket}/there", b"x")
    flux_server.configure(error_style=style)
    with pytest.raises(FileNotFoundError) as missing:
        fs.cat_file(f"{bucket}/missing.bin")
    assert str(missing.value) == f"No such object or bucket: {bucket}/missing.bin: No such object: {bucket}/missing.bin"
    flux_server.configure(deny_ops=["read"])
    with pytest.raises(PermissionError) as denied:
        fs.cat_file(f"{bucket}/there")
    assert str(denied.value) == (f"Permission denied (HTTP 403) for {bucket}/there: "
                                 "The caller does not have permission for 'read' operations.")
    flux_server.configure(deny_ops=[], fail_rate=1.0, fail_codes=[503], fail_ops=["read"])
    fs503 = make_fs(flux_server, retry={"max_attempts": 2, **FAST_RETRY})
    with pytest.raises(OSError) as failed:
        fs503.cat_file(f"{bucket}/there")
    assert str(failed.value) == f"HTTP 503: {bucket}/there: Injected fault (503) for a 'read' request."


def test_rm_whose_answer_was_lost_succeeds(flux_server, bucket):
    fs = make_fs(flux_server, retry=FAST_RETRY)
    fs.pipe({f"{bucket}/{k}": k.encode() for k in "abcd"})
    flux_server.reset_stats()
    flux_server.configure(lose_replies=1, fail_ops=["delete"])
    fs.rm(f"{bucket}/a")        # deleted, answer lost, re-sent (by aiohttp, on its own): 404 means done
    assert flux_server.stats()["faults"] == {"delete": 1}
    assert flux_server.stats()["requests"]["delete"] == 2
    flux_server.configure(lose_replies=2, fail_ops=["delete"])
    fs.rm(f"{bucket}/b")        # that re-send's answer lost too: the retry policy's attempt gets the 404
    assert flux_server.stats()["requests"]["delete"] == 2 + 3
    flux_server.configure(lose_replies=2, fail_ops=["delete"])
    fs.rm([f"{bucket}/c", f"{bucket}/d"])   # many paths: the same through _delete_files
    assert flux_server.list_names(bucket) == []
    assert not fs.exists(f"{bucket}/a")


def test_rm_of_a_missing_object_still_raises(flux_server, bucket):
    fs = make_fs(flux_server, retry=FAST_RETRY)
    with pytest.raises(FileNotFoundError, match=f"{bucket}/never"):
        fs.rm(f"{bucket}/never")
    with pytest.raises(FileNotFoundError,
                       match=f"^No such object or bucket: {bucket}/never: No such object: {bucket}/never$"):
        fs.rm_file(f"{bucket}/never")

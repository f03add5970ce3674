"""Bad safetensors objects and bad saves: clear errors naming the object, nothing half-written."""
from __future__ import annotations

import json
import struct

import pytest
import safetensors.torch as st
import torch

from fluxfs import temporaries
from fluxfs.gcs import bridge
from fluxfs.pipes.safetensors import SafetensorsError, load_file, safe_open, save_file
from tests.conftest import make_fs


def raw_file(header: dict, data: bytes) -> bytes:
    text = json.dumps(header).encode()
    return struct.pack("<Q", len(text)) + text + data


@pytest.fixture
def wfs(flux_server):
    return make_fs(flux_server, part_size=5 * 2**20)


def load_bad(wfs, bucket, body: bytes, match: str):
    wfs.pipe_file(f"{bucket}/bad.safetensors", body)
    with pytest.raises(SafetensorsError, match=match) as err:
        load_file(f"flux://{bucket}/bad.safetensors", fs=wfs)
    assert f"flux://{bucket}/bad.safetensors" in str(err.value)
    with pytest.raises(SafetensorsError, match=match):
        safe_open(f"flux://{bucket}/bad.safetensors", fs=wfs)


def test_corrupt_header_is_named(wfs, bucket):
    load_bad(wfs, bucket, struct.pack("<Q", 5) + b"{nope" + b"\0" * 8, "corrupt safetensors header, not valid JSON")
    load_bad(wfs, bucket, struct.pack("<Q", 2) + b"[]", "a JSON list instead of an object")


def test_short_or_empty_objects_are_not_safetensors(wfs, bucket):
    load_bad(wfs, bucket, b"", "0 bytes, fewer than the 8-byte header length")
    load_bad(wfs, bucket, b"abc", "3 bytes, fewer than the 8-byte header length")


def test_a_header_claiming_more_bytes_than_the_object_has(wfs, bucket):
    load_bad(wfs, bucket, struct.pack("<Q", 1000) + b"{}", "header claims 1000 bytes, the object has only 2")
    load_bad(wfs, bucket, struct.pack("<Q", 2**40) + b"{}", "more than the 100000000-byte limit")


def test_a_truncated_object(wfs, bucket):
    good = st.save({"a": torch.arange(1000, dtype=torch.float32)})
    load_bad(wfs, bucket, good[:-100],
             r"is truncated: its header places tensor bytes up to 4000, the object holds 3900")


def test_overlapping_offsets_gaps_and_wrong_sizes(wfs, bucket):
    f32 = {"dtype": "F32", "shape": [2]}
    load_bad(wfs, bucket, raw_file({"a": {**f32, "data_offsets": [0, 8]}, "b": {**f32, "data_offsets": [4, 12]}},
                                   b"\0" * 12), "tensor 'b' overlaps the one before it")
    load_bad(wfs, bucket, raw_file({"a": {**f32, "data_offsets": [4, 12]}}, b"\0" * 12),
             "4 bytes before tensor 'a' belong to no tensor")
    load_bad(wfs, bucket, raw_file({"a": {**f32, "data_offsets": [0, 12]}}, b"\0" * 12),
             r"tensor 'a' \(F32 \[2\]\) needs 8 bytes, its data_offsets \[0, 12\] give 12")
    load_bad(wfs, bucket, raw_file({"a": {**f32, "data_offsets": [0, 8]}}, b"\0" * 12),
             "4 bytes after the last tensor belong to no tensor")
    load_bad(wfs, bucket, raw_file({"a": {"dtype": "F99", "shape": [1], "data_offsets": [0, 1]}}, b"\0"),
             "tensor 'a' has dtype 'F99', which torch cannot hold")
    load_bad(wfs, bucket, raw_file({"a": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]}}, b"\0" * 4),
             r"tensor 'a' has shape \[-1\], not a list of sizes")


def test_missing_object_and_tensor(wfs, bucket):
    with pytest.raises(FileNotFoundError, match="nothing.safetensors"):
        load_file(f"flux://{bucket}/nothing.safetensors", fs=wfs)
    save_file({"a": torch.ones(2)}, f"flux://{bucket}/one.safetensors", fs=wfs)
    with safe_open(f"flux://{bucket}/one.safetensors", fs=wfs) as f:
        with pytest.raises(KeyError, match="has no tensor 'b'"):
            f.get_tensor("b")
    with pytest.raises(SafetensorsError, match="framework 'np' is not supported"):
        safe_open(f"flux://{bucket}/one.safetensors", framework="np", fs=wfs)


def test_bad_saves_are_refused_before_anything_is_written(wfs, bucket):
    url = f"flux://{bucket}/s.safetensors"
    with pytest.raises(SafetensorsError, match="'x' is a list, not a tensor"):
        save_file({"x": [1, 2]}, url, fs=wfs)
    with pytest.raises(SafetensorsError, match="metadata must map strings to strings"):
        save_file({"x": torch.ones(1)}, url, metadata={"n": 1}, fs=wfs)
    with pytest.raises(SafetensorsError, match="'__metadata__' is reserved"):
        save_file({"__metadata__": torch.ones(1)}, url, fs=wfs)
    assert not wfs.exists(url)


def test_a_save_failing_half_way_leaves_no_object(wfs, bucket, flux_server, monkeypatch):
    from fluxfs.pipes.weights import save as save_mod

    url = f"flux://{bucket}/atomic.safetensors"
    tensors = {f"w{i}": torch.full((2**20,), float(i)) for i in range(8)}   # 32 MiB: several parts
    real = save_mod.byte_view
    calls = []

    def failing(t):
        calls.append(1)
        if len(calls) == 6:
            raise KeyboardInterrupt   # as Ctrl-C would, after 5 tensors (20 MiB) went to the writer
        return real(t)

    monkeypatch.setattr(save_mod, "byte_view", failing)
    with pytest.raises(KeyboardInterrupt):
        save_file(tensors, url, fs=wfs)
    assert not wfs.exists(url)
    assert bridge.run(wfs, temporaries.list_incomplete_uploads, wfs, bucket) == []   # the upload was aborted
    monkeypatch.setattr(save_mod, "byte_view", real)
    save_file(tensors, url, fs=wfs)
    assert wfs.cat_file(url.removeprefix("flux://")) == st.save(tensors)


def test_a_deeply_nested_header_is_refused_naming_the_file(wfs, bucket):
    """'[[[[…' 100k deep in the header made json.loads raise RecursionError, naming nothing."""
    deep = b"[" * 100_000 + b"]" * 100_000
    load_bad(wfs, bucket, struct.pack("<Q", len(deep)) + deep, "corrupt safetensors header, not valid JSON "
             r"\(nested too deeply to parse")
    deep = b'{"a": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    load_bad(wfs, bucket, struct.pack("<Q", len(deep)) + deep, "nested too deeply to parse")


def test_fs_that_is_a_cache_in_front_of_flux_is_refused_naming_its_type(wfs, bucket, flux_server, tmp_path):
    """A cache forwards flux's attributes, so reading tensors through it would silently go around the cache."""
    from fluxfs import FilesystemHandle
    from fluxfs.pipes.safetensors import load_model_dir

    wfs.pipe_file(f"{bucket}/m.safetensors", raw_file({}, b""))
    cached = FilesystemHandle("filecache::flux", {"flux": {"endpoint_url": flux_server.url, "token": "anon"},
                                                  "filecache": {"cache_storage": str(tmp_path)}}).fs
    url = f"flux://{bucket}/m.safetensors"
    for call in (lambda: load_file(url, fs=cached), lambda: safe_open(url, fs=cached),
                 lambda: save_file({"t": torch.zeros(2)}, f"flux://{bucket}/new.safetensors", fs=cached),
                 lambda: load_model_dir(f"flux://{bucket}/model/", fs=cached)):
        with pytest.raises(TypeError, match="fs= must be a fluxfs FluxFileSystem .*not WholeFileCacheFileSystem"):
            call()
    assert not wfs.exists(f"{bucket}/new.safetensors")
    assert load_file(url, fs=wfs) == {}

"""decode(...): sample fields by extension, as a transform both shard datasets take."""
from __future__ import annotations

import io

import numpy as np
import pytest
import torch
from PIL import Image

from fluxfs.pipes.shards import FluxShardMapDataset, ShardError, ShardWriter, decode


def _png(color: tuple) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (4, 3), color).save(buf, format="PNG")
    return buf.getvalue()


def _sample() -> dict:
    t = torch.arange(6.0).reshape(2, 3)
    buf = io.BytesIO()
    torch.save(t, buf)
    npy = io.BytesIO()
    np.save(npy, np.eye(2))
    return {"__key__": "k", "__shard__": "flux://b/s.tar", "png": _png((10, 20, 30)), "cls": b"4",
            "txt": "héllo".encode(), "json": b'{"a": [1, 2]}', "npy": npy.getvalue(), "pt": buf.getvalue(),
            "seg.png": _png((1, 2, 3)), "raw": b"\x00\x01"}


def test_decode_every_extension():
    got = decode(image="numpy")(_sample())
    assert got["png"].shape == (3, 4, 3) and tuple(got["png"][0, 0]) == (10, 20, 30)
    assert tuple(got["seg.png"][0, 0]) == (1, 2, 3)
    assert (got["cls"], got["txt"], got["json"]) == (4, "héllo", {"a": [1, 2]})
    assert np.array_equal(got["npy"], np.eye(2)) and torch.equal(got["pt"], torch.arange(6.0).reshape(2, 3))
    assert got["raw"] == b"\x00\x01" and got["__key__"] == "k"
    img, label = decode("jpg;png", "cls", image="torch")(_sample())
    assert img.shape == (3, 3, 4) and img.dtype == torch.uint8 and label == 4
    assert isinstance(decode("png")(_sample())[0], Image.Image)
    assert decode("png", image=None)(_sample())[0] == _sample()["png"]
    assert decode("raw", handlers={"raw": len})(_sample()) == (2,)


def test_missing_extension_and_undecodable_member_name_the_sample():
    sample = _sample()
    del sample["cls"]
    with pytest.raises(ShardError, match=r"flux://b/s\.tar: sample 'k' has no 'cls' member \(it has: png, txt"):
        decode("png", "cls")(sample)
    sample["cls"] = b"not a number"
    with pytest.raises(ShardError, match=r"sample 'k': cannot decode its 'cls' member \(ValueError"):
        decode("cls")(sample)
    with pytest.raises(ValueError, match="image must be one of"):
        decode(image="jpeg")


def test_a_shard_sample_missing_a_field_through_the_map_dataset(flux_server, bucket):
    so = {"endpoint_url": flux_server.url, "token": "anon", "skip_instance_cache": True}
    with ShardWriter(f"flux://{bucket}/m/{{}}.tar", storage_options=so) as w:
        w.write({"__key__": "a", "png": _png((5, 5, 5)), "cls": 1})
        w.write({"__key__": "b", "png": _png((6, 6, 6))})  # no label
    ds = FluxShardMapDataset(w.shards, transform=decode("png", "cls", image="numpy"), storage_options=so)
    img, label = ds[0]
    assert label == 1 and tuple(img[0, 0]) == (5, 5, 5)
    with pytest.raises(ShardError, match=rf"flux://{bucket}/m/0\.tar: sample 'b' has no 'cls' member \(it has: png\)"):
        ds[1]

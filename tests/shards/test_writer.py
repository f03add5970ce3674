"""ShardWriter: shards through atomic uploads, an index after each, readable by `tar` and `webdataset`."""
from __future__ import annotations

import io
import json
import shutil
import subprocess
import tarfile

import numpy as np
import pytest

from fluxfs.pipes.shards import ShardIndex, ShardWriter
from fluxfs.pipes.shards.index import index_path
from fluxfs.pipes.shards.tarformat import scan
from tests.badinput.conftest import assert_nothing_left
from tests.conftest import make_fs


def _samples(n: int, size: int = 3000) -> list[dict]:
    return [{"__key__": f"s/{i:05d}", "jpg": bytes([i % 256]) * (size + i), "cls": i % 10,
             "json": {"i": i}} for i in range(n)]


@pytest.fixture
def so(flux_server) -> dict:
    return {"endpoint_url": flux_server.url, "token": "anon", "skip_instance_cache": True}


def test_writer_rolls_shards_by_samples_and_size_and_indexes_them(flux_server, bucket, so):
    fs = make_fs(flux_server)
    pattern = f"flux://{bucket}/train/shard-{{:04d}}.tar"
    with ShardWriter(pattern, max_samples=4, storage_options=so) as w:
        w.write_all(_samples(10))
    assert w.shards == [pattern.format(i) for i in range(3)]
    seen = []
    for url, idx in zip(w.shards, w.indexes):
        data = fs.cat(url)
        info = fs.info(url)
        assert (info["size"], str(info["generation"])) == (len(data), idx.generation)
        stored = ShardIndex.from_bytes(url, fs.cat(index_path(url)))
        assert stored.members == scan(url, data) and stored.generation == idx.generation
        with tarfile.open(fileobj=io.BytesIO(data)) as tf:
            for m in tf.getmembers():
                seen.append((m.name, tf.extractfile(m).read()))
    want = []
    for s in _samples(10):
        want += [(f"{s['__key__']}.jpg", s["jpg"]), (f"{s['__key__']}.cls", str(s["cls"]).encode()),
                 (f"{s['__key__']}.json", json.dumps(s["json"]).encode())]
    assert seen == want
    # By size: each sample takes 5.6 KB in the tar (3 headers, padded data), so 13 KB shards hold 2.
    with ShardWriter(f"flux://{bucket}/small/{{}}.tar", max_size=13_000, storage_options=so) as w:
        w.write_all(_samples(5))
    assert [len(i.samples) for i in w.indexes] == [2, 2, 1]
    assert all(i.size <= 13_000 for i in w.indexes)


def test_exception_mid_shard_leaves_finished_shards_and_nothing_else(flux_server, bucket, so):
    fs = make_fs(flux_server)
    with pytest.raises(RuntimeError, match="stop"):
        with ShardWriter(f"flux://{bucket}/x/{{:02d}}.tar", max_samples=2, storage_options=so) as w:
            w.write_all(_samples(3, size=6 * 2**20 // 3))
            raise RuntimeError("stop")
    assert sorted(fs.find(f"{bucket}/x/")) == [f"{bucket}/x/00.tar", f"{bucket}/x/00.tar.idx"]
    assert_nothing_left(flux_server, bucket)


def test_bad_samples_and_patterns_are_named(flux_server, bucket, so):
    with pytest.raises(ValueError, match="needs one numbered field|no field for the shard number"):
        ShardWriter(f"flux://{bucket}/plain.tar", storage_options=so)
    w = ShardWriter(f"flux://{bucket}/b/{{}}.tar", storage_options=so)
    with pytest.raises(ValueError, match="non-empty string '__key__'"):
        w.write({"jpg": b"x"})
    with pytest.raises(ValueError, match=r"sample key 'a\.b' has a '\.'"):
        w.write({"__key__": "a.b", "jpg": b"x"})
    with pytest.raises(ValueError, match=r"sample 'k\\udcff': member name 'k\\udcff\.jpg' is not valid text"):
        w.write({"__key__": "k\udcff", "jpg": b"x"})
    with pytest.raises(TypeError, match="field 'jpg' is a object"):
        w.write({"__key__": "a", "jpg": object()})
    w.write({"__key__": "a", "jpg": b"x"})
    with pytest.raises(ValueError, match="repeats the previous sample's"):
        w.write({"__key__": "a", "png": b"y"})
    w.close()
    assert w.shards == [f"flux://{bucket}/b/0.tar"]


def test_our_shards_read_by_tar_and_webdataset(flux_server, bucket, so, tmp_path):
    wds = pytest.importorskip("webdataset")
    fs = make_fs(flux_server)
    arr = np.arange(12, dtype=np.float32).reshape(3, 4)
    samples = [{"__key__": f"{i:03d}", "txt": f"caption {i}", "npy": arr * i, "cls": i} for i in range(5)]
    with ShardWriter(f"flux://{bucket}/w/{{:03d}}.tar", max_samples=3, storage_options=so) as w:
        w.write_all(samples)
    local = []
    for url in w.shards:
        path = tmp_path / url.rsplit("/", 1)[1]
        path.write_bytes(fs.cat(url))
        local.append(str(path))
    got = list(wds.WebDataset(local, shardshuffle=False).decode())
    assert [g["__key__"] for g in got] == [s["__key__"] for s in samples]
    assert [g["txt"] for g in got] == [s["txt"] for s in samples]
    assert [g["cls"] for g in got] == [s["cls"] for s in samples]
    assert all(np.array_equal(g["npy"], s["npy"]) for g, s in zip(got, samples))
    if shutil.which("tar"):
        listed = subprocess.run(["tar", "-tf", local[0]], capture_output=True, text=True, check=True).stdout
        assert listed.split() == [f"{i:03d}.{e}" for i in range(3) for e in ("txt", "npy", "cls")]
        subprocess.run(["tar", "-xf", local[0], "-C", str(tmp_path)], check=True)
        assert (tmp_path / "001.txt").read_text() == "caption 1"


@pytest.mark.parametrize("name, size", [("a/b/000123.jpg", 5), ("x" * 100, 0), ("x" * 99 + "é", 3),
                                        ("x" * 101, 1000), ("k.bin", 8**11 - 1), ("k.bin", 8**11)])
def test_member_span_is_what_the_member_takes(name, size):
    from fluxfs.pipes.shards.tarformat import member_header, padded
    from fluxfs.pipes.shards.writer import member_span

    assert member_span(name, size) == len(member_header(name, size)) + padded(size)

"""Indexing shards that have none by scanning headers with ranged reads; loading and checking indexes."""
from __future__ import annotations

import io
import logging
import shutil
import subprocess
import tarfile

import pytest

from fluxfs.pipes.shards import ShardError, ShardIndex
from fluxfs.pipes.shards.index import index_path
from fluxfs.pipes.shards.indexer import build_index, load_index, write_index
from fluxfs.pipes.shards.tarformat import scan
from fluxfs.pipes.shards.tarformat import END_OF_ARCHIVE
from tests.conftest import make_fs


def _tar(members: list[tuple[str, bytes]]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as tf:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def _gets(server) -> int:
    return server.stats()["requests"].get("read", 0)  # GETs of data and metadata


def test_webdataset_and_tar_written_shards_are_indexed(flux_server, bucket, tmp_path):
    wds = pytest.importorskip("webdataset")
    fs = make_fs(flux_server)
    path = tmp_path / "theirs.tar"
    with wds.TarWriter(str(path)) as sink:
        for i in range(30):
            sink.write({"__key__": f"k{i:03d}", "txt": f"text {i}", "cls": i % 3, "bin": bytes(i * 100)})
    shards = {"theirs.tar": path.read_bytes()}
    if shutil.which("tar"):
        src = tmp_path / "src"
        (src / "d").mkdir(parents=True)
        for i in range(3):
            (src / "d" / f"{i}.txt").write_text(f"file {i}")
        subprocess.run(["tar", "-cf", str(tmp_path / "gnu.tar"), "-C", str(src), "d"], check=True)
        shards["gnu.tar"] = (tmp_path / "gnu.tar").read_bytes()
    for name, data in shards.items():
        fs.pipe_file(f"{bucket}/{name}", data)
        index = build_index(fs, f"flux://{bucket}/{name}")
        assert index.members == scan(name, data) and index.size == len(data)
        assert index.generation == str(fs.info(f"{bucket}/{name}")["generation"])
    index = build_index(fs, f"flux://{bucket}/theirs.tar")
    assert [s.key for s in index.samples] == [f"k{i:03d}" for i in range(30)]


def test_large_members_cost_one_small_read_each(flux_server, bucket):
    fs = make_fs(flux_server)
    data = _tar([(f"{i}.bin", bytes([i]) * (3 * 2**20)) for i in range(4)])
    fs.pipe_file(f"{bucket}/big.tar", data)
    info = fs.info(f"{bucket}/big.tar")
    flux_server.reset_stats()
    index = build_index(fs, f"flux://{bucket}/big.tar", size=info["size"], generation=info["generation"])
    assert [m.name for m in index.members] == [f"{i}.bin" for i in range(4)]
    assert _gets(flux_server) == 5  # one window per header (the first 64 KiB, then 4 KiB), and the end


def test_small_members_are_read_in_growing_windows(flux_server, bucket):
    fs = make_fs(flux_server)
    data = _tar([(f"{i:05d}.txt", b"x" * 100) for i in range(3000)])  # 3 MB of 1 KiB members
    fs.pipe_file(f"{bucket}/small.tar", data)
    info = fs.info(f"{bucket}/small.tar")
    flux_server.reset_stats()
    index = build_index(fs, f"flux://{bucket}/small.tar", size=info["size"], generation=info["generation"])
    assert len(index.members) == 3000
    assert _gets(flux_server) == 6  # windows of 64 KiB, 128 KiB, ... 2 MiB: 1 KiB headers, so no read is per member


def test_truncated_and_empty_shards(flux_server, bucket):
    fs = make_fs(flux_server)
    data = _tar([(f"{i}.bin", bytes(5000)) for i in range(4)])
    fs.pipe_file(f"{bucket}/cut.tar", data[:9000])
    with pytest.raises(ShardError, match=rf"flux://{bucket}/cut\.tar at byte 9000: truncated"):
        build_index(fs, f"flux://{bucket}/cut.tar")
    fs.pipe_file(f"{bucket}/empty.tar", END_OF_ARCHIVE)
    assert build_index(fs, f"flux://{bucket}/empty.tar").members == []
    fs.pipe_file(f"{bucket}/zero.tar", b"")
    with pytest.raises(ShardError, match=rf"flux://{bucket}/zero\.tar at byte 0: empty object: not a tar shard"):
        build_index(fs, f"flux://{bucket}/zero.tar")


def test_load_index_builds_a_missing_one_and_refuses_a_stale_one(flux_server, bucket, caplog):
    fs = make_fs(flux_server)
    url = f"flux://{bucket}/s.tar"
    data = _tar([("a.txt", b"one"), ("b.txt", b"two")])
    fs.pipe_file(f"{bucket}/s.tar", data)
    with caplog.at_level(logging.WARNING):
        built = load_index(fs, url)
    assert "has no index" in caplog.text and [m.name for m in built.members] == ["a.txt", "b.txt"]
    with pytest.raises(FileNotFoundError, match=rf"shard {url} has no index .*fluxfs shard index"):
        load_index(fs, url, build_missing=False)
    write_index(fs, built)
    assert ShardIndex.from_bytes(url, fs.cat(index_path(f"{bucket}/s.tar"))).members == built.members
    assert load_index(fs, url, build_missing=False).members == built.members
    fs.pipe_file(f"{bucket}/s.tar", data)  # same bytes, new generation
    with pytest.raises(ShardError, match=rf"{url}: the shard was replaced after it was indexed"):
        load_index(fs, url)
    with pytest.raises(FileNotFoundError, match=rf"shard flux://{bucket}/nope.tar does not exist"):
        load_index(fs, f"flux://{bucket}/nope.tar")

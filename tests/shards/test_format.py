"""The shard format: tar members we write are what `tarfile` and `webdataset` read, and back."""
from __future__ import annotations

import io
import tarfile

import pytest

from fluxfs.pipes.shards import ShardError, ShardIndex
from fluxfs.pipes.shards.samples import group_samples, sample_dict, split_key
from fluxfs.pipes.shards.tarformat import Member, TarScanner, member_bytes, scan
from fluxfs.pipes.shards.tarformat import END_OF_ARCHIVE

SAMPLES = [
    ("000000", {"jpg": b"\xff\xd8" + b"a" * 1000, "cls": b"3"}),
    ("000001", {"jpg": b"", "cls": b"7", "seg.png": b"p" * 511}),
    ("dir/" + "x" * 150, {"txt": "ünïcode".encode()}),  # long name: pax record
]


def _our_tar() -> bytes:
    pieces = []
    for key, fields in SAMPLES:
        for ext, data in fields.items():
            pieces += member_bytes(f"{key}.{ext}", data)
    pieces.append(END_OF_ARCHIVE)
    return b"".join(bytes(p) for p in pieces)


def test_split_key_follows_webdataset_convention():
    assert split_key("a/b.c/000123.seg.png") == ("a/b.c/000123", "seg.png")
    assert split_key("000123.jpg") == ("000123", "jpg")
    assert split_key("README") == ("README", "")


def test_our_tar_reads_back_with_tarfile_and_scan():
    data = _our_tar()
    with tarfile.open(fileobj=io.BytesIO(data)) as tf:
        got = {m.name: tf.extractfile(m).read() for m in tf.getmembers()}
    want = {f"{k}.{e}": d for k, f in SAMPLES for e, d in f.items()}
    assert got == want
    members = scan("s.tar", data)
    assert [m.name for m in members] == list(want)
    assert all(data[m.offset:m.end] == want[m.name] for m in members)
    spans = list(group_samples(members))
    assert [s.key for s in spans] == [k for k, _ in SAMPLES]
    sample = sample_dict(spans[1], "s.tar", data, 0)
    assert sample == {"__key__": "000001", "__shard__": "s.tar", "jpg": b"", "cls": b"7", "seg.png": b"p" * 511}


def test_tarfile_written_shards_scan_fed_in_odd_pieces():
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as tf:
        for i in range(5):
            payload = bytes([i]) * (i * 700)
            info = tarfile.TarInfo(f"{'long' * 40}/{i:06d}.bin")
            info.size = len(payload)
            tf.addfile(info, io.BytesIO(payload))
    data = buf.getvalue()
    scanner = TarScanner("g.tar")
    found = []
    for lo in range(0, len(data), 333):
        found += scanner.feed(data[lo:lo + 333])
    scanner.finish(len(data))
    assert [m.name for m in found] == [f"{'long' * 40}/{i:06d}.bin" for i in range(5)]
    assert [data[m.offset:m.end] for m in found] == [bytes([i]) * (i * 700) for i in range(5)]


def test_webdataset_reads_our_shard(tmp_path):
    wds = pytest.importorskip("webdataset")
    path = tmp_path / "s.tar"
    path.write_bytes(_our_tar())
    got = [{k: v for k, v in s.items() if not k.startswith("__")}
           for s in wds.WebDataset(str(path), shardshuffle=False)]
    assert got == [fields for _, fields in SAMPLES]


@pytest.mark.parametrize("cut", [100, 512 + 10, 2048])
def test_truncated_shard_names_shard_and_offset(cut):
    data = _our_tar()[:cut]
    with pytest.raises(ShardError, match=r"s\.tar at byte \d+: truncated"):
        scan("s.tar", data)


def test_garbage_is_not_a_tar_header():
    with pytest.raises(ShardError, match=r"s\.tar at byte 0: not a tar header"):
        scan("s.tar", b"x" * 1024)


def test_index_round_trip_and_checks():
    data = _our_tar()
    index = ShardIndex("b/s.tar", len(data), scan("b/s.tar", data), generation="17")
    again = ShardIndex.from_bytes("b/s.tar", index.to_bytes())
    assert again.members == index.members and again.generation == "17"
    assert [s.key for s in again.samples] == [k for k, _ in SAMPLES]
    again.check_current(len(data), "17")
    with pytest.raises(ShardError, match="replaced after it was indexed"):
        again.check_current(len(data), "18")
    overlapping = ShardIndex("b/s.tar", len(data), [Member("a.x", 512, 600), Member("a.y", 1024, 5)])
    with pytest.raises(ShardError, match="overlaps another or lies outside"):
        ShardIndex.from_bytes("b/s.tar", overlapping.to_bytes())
    with pytest.raises(ShardError, match=r"b/s\.tar\.idx: not a fluxfs shard index"):
        ShardIndex.from_bytes("b/s.tar", b"hello\n")
    head, *lines = index.to_bytes().decode().splitlines()
    for bad in ('["a.x", 512]', '{"a": 1, "b": 2, "c": 3}', '["a.x", "nine", 5]', "[1, 2"):
        text = "\n".join([head, *lines[:2], bad, *lines[3:]]) + "\n"
        with pytest.raises(ShardError, match=r"b/s\.tar\.idx: line 4 is not \[name, offset, size\]"):
            ShardIndex.from_bytes("b/s.tar", text.encode())
    text = "\n".join([head, *(line.replace(",", ",  ") for line in lines)]) + "\n"  # as another writer spaces it
    assert ShardIndex.from_bytes("b/s.tar", text.encode()).members == index.members

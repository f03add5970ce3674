"""An index whose size and generation match its shard but whose names or offsets do not: every reader of
indexed samples checks the headers it reads and the shard's end, and raises naming the shard and the member."""
from __future__ import annotations

import dataclasses

import pytest
from torchdata.nodes import IterableWrapper, Loader

from fluxfs.pipes.shards import FluxShardDataset, FluxShardMapDataset, ReadShards, ShardError, ShardIndex
from fluxfs.pipes.shards.tarformat import scan
from fluxfs.pipes.shards.index import index_path

from .conftest import shard_bytes, shard_keys


@pytest.fixture
def options(flux_server) -> dict:
    return {"endpoint_url": flux_server.url, "token": "anon", "skip_instance_cache": True}


def _fields(key: str) -> dict[str, bytes]:  # the same sizes for every key: shards of equal layout
    return {"bin": (key.encode() * 100)[:700], "cls": b"7"}


def _with_index(fs, path: str, data: bytes, members) -> None:
    """The shard `data` at `path`, and beside it an index of `members` carrying the shard's size and generation."""
    fs.pipe(path, data)
    fs.pipe(index_path(path), ShardIndex(path, len(data), list(members), str(fs.info(path)["generation"])).to_bytes())


def _every_reader(url: str, options: dict) -> dict:
    """What each reader of indexed samples does with the shard: its samples, or the ShardError it raised."""
    out = {}
    readers = {
        "iterable": lambda: list(FluxShardDataset.from_shards(url, storage_options=options)),
        "iterable-parts": lambda: [s for r in range(3) for s in FluxShardDataset.from_shards(
            url, storage_options=options, rank=r, world_size=3, drop_uneven=None)],
        "iterable-equal": lambda: [s for r in range(3) for s in FluxShardDataset.from_shards(
            url, storage_options=options, rank=r, world_size=3)],
        "node": lambda: list(Loader(ReadShards(IterableWrapper([url]), storage_options=options))),
        "map": lambda: (lambda ds: [ds[i] for i in range(len(ds))])(FluxShardMapDataset(url, storage_options=options)),
        "map-batch": lambda: (lambda ds: ds.__getitems__(list(range(len(ds)))))(
            FluxShardMapDataset(url, storage_options=options)),
    }
    for name, read in readers.items():
        try:
            out[name] = read()
        except ShardError as e:
            out[name] = e
    return out


def _shifted(members, by):
    return members[:-1] + [dataclasses.replace(members[-1], offset=members[-1].offset + by)]


CASES = {
    # Another shard's index, same size and offsets (keys of the same length), different names.
    "other-names": (lambda data, other: scan("x", other), r"member 's1/0000\.bin' .* say member 's0/0000\.bin'"),
    # The last member's offset moved by a block (still in order and inside the shard).
    "shifted-offset": (lambda data, other: _shifted(scan("x", data), 512),
                       r"the index lists member 's0/0003\.cls' .* say member 's0/0003\.cls' \(1 bytes\) starts at"),
    # The last sample left out: the shard holds members after the index's last.
    "last-sample-dropped": (lambda data, other: scan("x", data)[:-2],
                            r"the index lists no member after byte \d+, but the shard holds member 's0/0003\.bin'"),
    # A middle sample left out.
    "middle-sample-dropped": (lambda data, other: scan("x", data)[:2] + scan("x", data)[4:],
                              r"the index lists member 's0/0002\.bin' .* say member 's0/0001\.bin'"),
    # No members at all.
    "empty-index": (lambda data, other: [], r"the index lists no member.* holds member 's0/0000\.bin'"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_an_index_that_disagrees_with_its_shard_is_an_error_naming_shard_and_member(fs, bucket, options, case):
    data, other = shard_bytes(shard_keys(0, 4), _fields), shard_bytes(shard_keys(1, 4), _fields)
    assert len(data) == len(other)
    members, message = CASES[case]
    _with_index(fs, f"{bucket}/i/{case}.tar", data, members(data, other))
    url = f"flux://{bucket}/i/{case}.tar"
    got = _every_reader(url, options)
    for reader, result in got.items():
        assert isinstance(result, ShardError), f"{reader} read {len(result)} samples silently"
        assert str(result).startswith(f"{url} at byte ") and "does not describe this shard" in str(result), reader
        assert __import__("re").search(message, str(result)), (reader, str(result))


def test_a_true_index_reads_every_sample_with_its_checks(fs, bucket, options):
    data = shard_bytes(shard_keys(0, 4), _fields)
    _with_index(fs, f"{bucket}/ok/a.tar", data, scan("x", data))
    for reader, result in _every_reader(f"flux://{bucket}/ok/a.tar", options).items():
        keys = sorted(s["__key__"] for s in result)
        if reader == "iterable-equal":  # 4 samples padded to 6 over 3 ranks
            assert len(keys) == 6 and sorted(set(keys)) == shard_keys(0, 4)
        else:
            assert keys == shard_keys(0, 4), reader


def test_an_index_of_a_zero_byte_shard_is_refused(fs, bucket, options):
    _with_index(fs, f"{bucket}/zero/a.tar", b"", [])
    with pytest.raises(ShardError, match=rf"^{bucket}/zero/a\.tar\.idx: describes a shard of 0 bytes"):
        list(FluxShardDataset.from_shards(f"flux://{bucket}/zero/a.tar", storage_options=options))

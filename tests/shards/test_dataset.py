"""FluxShardDataset: exactly-once sharding over ranks x workers, shuffling, resume, and bad shards."""
from __future__ import annotations

import hashlib
import itertools
import subprocess
import sys
import warnings
from collections import Counter

import pytest
from torch.utils.data import DataLoader

from fluxfs.pipes.shards import FluxShardDataset, MissingIndexWarning, ShardError

from fluxfs.pipes.shards.tarformat import member_bytes

from .conftest import COUNTS, all_sample_keys, payload, put_shard, sample_fields, shard_bytes, shard_keys


@pytest.fixture(scope="module")
def options(flux_server) -> dict:
    return {"endpoint_url": flux_server.url, "token": "anon"}


def make(bucket, options, which="all", **kwargs) -> FluxShardDataset:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", MissingIndexWarning)
        if which == "all":  # 5 shards, one without an index, one without samples
            return FluxShardDataset.from_prefix(f"flux://{bucket}/ds/", storage_options=options, **kwargs)
        return FluxShardDataset.from_shards(f"flux://{bucket}/ds/shard-{{000000..000001}}.tar",
                                            storage_options=options, **kwargs)


def keys_of(samples) -> list[str]:
    out = []
    for s in samples:
        assert s["bin"] == payload(s["__key__"]) and s["cls"] == sample_fields(s["__key__"])["cls"], s["__key__"]
        out.append(s["__key__"])
    return out


def loader_keys(ds, num_workers) -> list[str]:
    return keys_of(DataLoader(ds, batch_size=None, num_workers=num_workers))


EXPECTED = {"all": all_sample_keys(), "two": shard_keys(0, COUNTS[0]) + shard_keys(1, COUNTS[1])}


@pytest.mark.parametrize("which", ["all", "two"])
@pytest.mark.parametrize("world_size", [1, 2, 3])
@pytest.mark.parametrize("num_workers", [0, 1, 2, 3])
def test_every_sample_once_per_epoch_over_ranks_and_workers(shard_bucket, options, which, world_size, num_workers):
    """drop_uneven=None: neither padded nor dropped (equal counts: tests/shards/test_equal_shares.py)."""
    got = []
    for rank in range(world_size):
        ds = make(shard_bucket, options, which, shuffle=True, seed=1, rank=rank, world_size=world_size,
                  shuffle_buffer=3, drop_uneven=None)
        got += loader_keys(ds, num_workers)
    assert Counter(got) == Counter(EXPECTED[which])


def test_shuffle_is_fixed_by_seed_and_epoch_and_differs_across_epochs(shard_bucket, options):
    ds = make(shard_bucket, options, shuffle=True, seed=5)
    epoch0 = keys_of(ds)
    ds.set_epoch(1)
    epoch1 = keys_of(ds)
    assert sorted(epoch0) == sorted(epoch1) == sorted(all_sample_keys())
    assert epoch0 != epoch1 and epoch0 != all_sample_keys()
    again = make(shard_bucket, options, shuffle=True, seed=5)
    assert keys_of(again) == epoch0
    again.set_epoch(1)
    assert keys_of(again) == epoch1
    assert keys_of(make(shard_bucket, options, shuffle=True, seed=6)) != epoch0
    assert keys_of(make(shard_bucket, options)) == all_sample_keys()  # no shuffle: shard order


# The sample order of seed 5, epochs 0 and 1, a buffer of 4: changes to the reader or the shuffle buffer keep it.
PINNED_ORDER = {0: "6a7daf2a574557fb", 1: "7cf022b669910625"}


@pytest.mark.parametrize("range_size", [2**20, 512])
def test_the_order_for_a_seed_and_epoch_is_pinned(shard_bucket, options, range_size):
    ds = make(shard_bucket, options, shuffle=True, seed=5, shuffle_buffer=4, range_size=range_size)
    for epoch, digest in PINNED_ORDER.items():
        ds.set_epoch(epoch)
        keys = keys_of(ds)
        assert hashlib.sha256(" ".join(keys).encode()).hexdigest()[:16] == digest, keys


@pytest.mark.parametrize("range_size", [2**20, 512])  # one GET per shard; many, in flight across shards
@pytest.mark.parametrize("which", ["all", "two"])
def test_resume_at_every_position_yields_exactly_the_rest(shard_bucket, options, which, range_size):
    kwargs = dict(shuffle=True, seed=3, shuffle_buffer=4, rank=1, world_size=3, range_size=range_size,
                  ranges_in_flight=3)
    full = keys_of(make(shard_bucket, options, which, **kwargs))
    assert full
    for k in range(len(full) + 1):
        ds = make(shard_bucket, options, which, **kwargs)
        it = iter(ds)
        head = [next(it)["__key__"] for _ in range(k)]
        state = ds.state_dict()
        resumed = make(shard_bucket, options, which, **kwargs)
        resumed.load_state_dict(state)
        assert head + keys_of(resumed) == full, f"resumed after {k}"


def test_state_of_another_layout_is_refused_clearly(shard_bucket, options):
    ds = make(shard_bucket, options, rank=0, world_size=2)
    it = iter(ds)
    next(it)
    other = make(shard_bucket, options, rank=0, world_size=3)
    other.load_state_dict(ds.state_dict())
    with pytest.raises(ValueError, match=r"saved by reader 0 of 2 .* this is reader 0 of 3"):
        iter(other)


def test_truncated_shard_names_shard_and_offset(bucket, options, fs):
    data = shard_bytes(shard_keys(0, 4))
    fs.pipe(f"{bucket}/t/a.tar", data[: len(data) - 1500])
    with pytest.warns(MissingIndexWarning):
        ds = FluxShardDataset.from_prefix(f"flux://{bucket}/t/", storage_options=options)
    with pytest.raises(ShardError, match=rf"flux://{bucket}/t/a\.tar at byte \d+: truncated"):
        list(ds)


def test_empty_tar_yields_nothing_and_a_zero_byte_object_is_refused_by_every_reader(bucket, options, fs):
    from torchdata.nodes import IterableWrapper, Loader

    from fluxfs.pipes.shards import FluxShardMapDataset, ReadShards
    from fluxfs.pipes.shards.indexer import build_index

    put_shard(fs, f"{bucket}/e/b.tar", shard_bytes([]))
    put_shard(fs, f"{bucket}/e/c.tar", shard_bytes(shard_keys(2, 2)))
    assert keys_of(FluxShardDataset.from_prefix(f"flux://{bucket}/e/", storage_options=options)) == shard_keys(2, 2)
    fs.pipe(f"{bucket}/e/a.tar", b"")  # as tarfile.open: ReadError("empty file"), in every reader alike
    zero = rf"^flux://{bucket}/e/a\.tar at byte 0: empty object: not a tar shard"
    with pytest.warns(MissingIndexWarning, match="1 of 3"):
        ds = FluxShardDataset.from_prefix(f"flux://{bucket}/e/", storage_options=options)
    with pytest.raises(ShardError, match=zero):
        list(ds)
    node = ReadShards(IterableWrapper([f"flux://{bucket}/e/a.tar"]), storage_options=options)
    with pytest.warns(MissingIndexWarning), pytest.raises(ShardError, match=zero):
        list(Loader(node))
    with pytest.raises(ShardError, match=zero):
        FluxShardMapDataset(f"flux://{bucket}/e/{{a,c}}.tar", storage_options=options)
    with pytest.raises(ShardError, match=zero):
        build_index(fs, f"flux://{bucket}/e/a.tar")


def test_sample_missing_an_extension(bucket, options, fs):
    def fields(key):
        return {"bin": payload(key)} if key.endswith("1") else sample_fields(key)

    put_shard(fs, f"{bucket}/m/a.tar", shard_bytes(shard_keys(0, 3), fields))
    got = list(FluxShardDataset.from_prefix(f"flux://{bucket}/m/", storage_options=options))
    assert [sorted(s) for s in got] == [["__key__", "__shard__", "bin", "cls"], ["__key__", "__shard__", "bin"],
                                        ["__key__", "__shard__", "bin", "cls"]]
    strict = FluxShardDataset.from_prefix(f"flux://{bucket}/m/", storage_options=options, extensions=("bin", "cls"))
    with pytest.raises(ShardError, match=r"a\.tar at byte \d+: sample 's0/0001' has no 'cls' member"):
        list(strict)


@pytest.mark.parametrize("indexed", [True, False])
def test_shard_replaced_during_the_epoch_is_reported(bucket, options, fs, indexed):
    for name in ("a", "b"):
        put_shard(fs, f"{bucket}/r/{name}.tar", shard_bytes(shard_keys(0, 3)), index=indexed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", MissingIndexWarning)
        # one small range in flight: b's reads start after a's last range, so after the replacement
        ds = FluxShardDataset.from_prefix(f"flux://{bucket}/r/", storage_options=options, range_size=512,
                                          ranges_in_flight=1)
    it = iter(ds)
    assert next(it)["__key__"] == "s0/0000"
    fs.pipe(f"{bucket}/r/b.tar", shard_bytes(shard_keys(1, 3)))
    with pytest.raises(ShardError, match=r"r/b\.tar at byte \d+: the shard was replaced during the epoch"):
        list(it)


def test_set_epoch_reaches_persistent_workers(shard_bucket, options):
    ds = make(shard_bucket, options, shuffle=True, seed=4)

    def epoch_keys(loader, epoch):
        ds.set_epoch(epoch)
        return keys_of(loader)

    persistent = DataLoader(ds, batch_size=None, num_workers=2, persistent_workers=True)
    got = [epoch_keys(persistent, e) for e in (0, 1, 2)]
    fresh = [epoch_keys(DataLoader(ds, batch_size=None, num_workers=2), e) for e in (0, 1, 2)]
    assert got == fresh
    assert got[0] != got[1] != got[2] and sorted(got[0]) == sorted(all_sample_keys())


@pytest.mark.parametrize("old,new", [((1, 0), (2, 3)), ((2, 2), (3, 1)), ((3, 1), (1, 2)), ((2, 3), (2, 0))])
@pytest.mark.parametrize("which", ["all", "two"])
def test_elastic_resume_reads_every_remaining_sample_once(shard_bucket, options, old, new, which):
    """Checkpointed at world size A x workers W, resumed at B x V: every sample of the epoch exactly once
    (drop_uneven=None; equal counts through an elastic resume: tests/shards/test_equal_shares.py)."""
    from torchdata.stateful_dataloader import StatefulDataLoader

    from fluxfs.pipes.data.epochs import reader_states

    kwargs = dict(shuffle=True, seed=9, shuffle_buffer=3, drop_uneven=None)
    head, states = [], []
    for rank in range(old[0]):
        ds = make(shard_bucket, options, which, rank=rank, world_size=old[0], **kwargs)
        ds.set_epoch(2)
        loader = StatefulDataLoader(ds, batch_size=None, num_workers=old[1])
        it = iter(loader)
        head += keys_of(itertools.islice(it, rank + 2))  # ranks stop at different points
        states.append(loader.state_dict())
        del it
    gathered = {"readers": reader_states(*states)}
    rest = []
    for rank in range(new[0]):
        ds = make(shard_bucket, options, which, rank=rank, world_size=new[0], **kwargs)
        ds.load_state_dict(gathered)
        rest += loader_keys(ds, new[1])
    assert Counter(head + rest) == Counter(EXPECTED[which])
    ds.set_epoch(3)  # the next epoch starts whole on the new layout
    assert Counter(sum((loader_keys(make(shard_bucket, options, which, rank=r, world_size=new[0], **kwargs), new[1])
                        for r in range(new[0])), [])) == Counter(EXPECTED[which])


def test_incomplete_gathered_state_is_refused(shard_bucket, options):
    ds = make(shard_bucket, options, rank=0, world_size=2)
    it = iter(ds)
    next(it)
    other = make(shard_bucket, options)
    other.load_state_dict({"readers": [ds.state_dict()]})
    with pytest.raises(ValueError, match=r"states of readers \[0\] \(of \[2\]\) do not make one complete layout"):
        iter(other)


def test_shard_deleted_during_the_epoch_is_named(bucket, options, fs):
    for name in ("a", "b"):
        put_shard(fs, f"{bucket}/d/{name}.tar", shard_bytes(shard_keys(0, 3)))
    it = iter(FluxShardDataset.from_prefix(f"flux://{bucket}/d/", storage_options=options, range_size=512,
                                           ranges_in_flight=1))
    next(it)
    fs.rm(f"{bucket}/d/b.tar")
    with pytest.raises(FileNotFoundError,
                       match=rf"flux://{bucket}/d/b\.tar at byte \d+: the shard was deleted during the epoch"):
        list(it)


@pytest.mark.parametrize("indexed", [True, False])
def test_samples_of_empty_members(bucket, options, fs, indexed):
    def fields(key):
        return {"txt": b""} if key.endswith(("0", "2")) else {"txt": b"x" * 700}

    put_shard(fs, f"{bucket}/z/a.tar", shard_bytes(shard_keys(0, 3), fields), index=indexed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", MissingIndexWarning)
        got = list(FluxShardDataset.from_prefix(f"flux://{bucket}/z/", storage_options=options))
    assert [(s["__key__"], s["txt"]) for s in got] == [("s0/0000", b""), ("s0/0001", b"x" * 700), ("s0/0002", b"")]


@pytest.mark.parametrize("in_flight", [1, 2, 5])
def test_small_ranges_in_flight_across_shards(shard_bucket, options, in_flight):
    ds = make(shard_bucket, options, range_size=300, ranges_in_flight=in_flight)
    assert keys_of(ds) == all_sample_keys()


def test_corrupt_shard_names_shard_and_offset(bucket, options, fs):
    good = shard_bytes(shard_keys(0, 2))
    bad = bytearray(good)
    second = len(bytes(member_bytes("s0/0000.bin", payload("s0/0000"))[0])) + len(payload("s0/0000"))
    second = -(-second // 512) * 512  # the second member's header, after the first member's padded data
    bad[second:second + 512] = b"\x07" * 512
    fs.pipe(f"{bucket}/c/a.tar", bytes(bad))
    with pytest.warns(MissingIndexWarning):
        ds = FluxShardDataset.from_prefix(f"flux://{bucket}/c/", storage_options=options)
    with pytest.raises(ShardError, match=rf"flux://{bucket}/c/a\.tar at byte {second}: not a tar header"):
        list(ds)


def test_numpy_s_generators_are_loaded_before_dataloader_workers_fork():
    """Loaded lazily, numpy.random costs each forked worker ~0.1 s of CPU on its first epoch_order, every epoch."""
    code = "import sys, fluxfs.pipes.shards; print('numpy.random' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.stdout.strip() == "True", done.stderr[-2000:]

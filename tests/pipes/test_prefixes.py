"""A prefix URL without '/' names a directory (``train`` is ``train/``), never its siblings ``train2/``, ``train3/``."""
from __future__ import annotations

import warnings

import pytest

from fluxfs.pipes import FluxIterableDataset, FluxMapDataset, FluxShardDataset
from fluxfs.pipes.data import AmbiguousPrefixWarning
from fluxfs.pipes.shards import FluxShardMapDataset, ShardWriter
from tests.conftest import make_fs

SIZES = {"train": 5, "train2": 3, "train3": 2}


@pytest.fixture
def siblings(flux_server, bucket) -> str:
    """train/ (5 objects), train2/ (3), train3/ (2), and the same as shards under sh/train*/, one per sample."""
    fs = make_fs(flux_server)
    fs.pipe({f"{bucket}/{d}/{i}.bin": f"{d}-{i}".encode() for d, n in SIZES.items() for i in range(n)})
    so = {"endpoint_url": flux_server.url, "token": "anon"}
    for d, n in SIZES.items():
        with ShardWriter(f"flux://{bucket}/sh/{d}/s-{{:03d}}.tar", max_samples=1, storage_options=so) as w:
            w.write_all({"__key__": f"{d}-{i}", "bin": b"x"} for i in range(n))
    return bucket


def test_object_datasets_read_the_directory_a_bare_prefix_names(siblings, storage_options):
    for cls in (FluxMapDataset, FluxIterableDataset):
        for url in (f"flux://{siblings}/train", f"flux://{siblings}/train/"):
            keys = sorted(k for k, _ in cls.from_prefix(url, storage_options=storage_options))
            assert keys == [f"train/{i}.bin" for i in range(5)], (cls, url)


def test_shard_datasets_read_the_directory_a_bare_prefix_names(siblings, storage_options):
    url = f"flux://{siblings}/sh/train"
    keys = sorted(s["__key__"] for s in FluxShardDataset.from_prefix(url, storage_options=storage_options))
    assert keys == [f"train-{i}" for i in range(5)]
    assert len(FluxShardMapDataset.from_prefix(url, storage_options=storage_options)) == 5


def test_a_bare_prefix_of_siblings_warns_naming_them_unless_asked_for(siblings, storage_options):
    """No directory by that name: read as the documented key prefix, with a warning naming what it mixes."""
    url = f"flux://{siblings}/tra"
    ds = FluxMapDataset.from_prefix(url, storage_options=storage_options)
    with pytest.warns(AmbiguousPrefixWarning, match=rf"{url} names no directory .* the 10 object\(s\) whose keys "
                      r"start with 'tra' \(train/0.bin, train/1.bin, train/2.bin, train/3.bin and 6 more\), from "
                      r"however many directories. End the URL with '/'.*bare_prefix=True"):
        assert len(ds) == 10
    with pytest.warns(AmbiguousPrefixWarning, match=r"the 10 object\(s\) whose keys start with 'sh/tr' "
                      r"\(sh/train/s-000.tar"):
        assert len(list(FluxShardDataset.from_prefix(f"flux://{siblings}/sh/tr", **storage_options))) == 10
    with pytest.warns(AmbiguousPrefixWarning, match="bare_prefix=True"):
        FluxShardMapDataset.from_prefix(f"flux://{siblings}/sh/tr", storage_options=storage_options)
    with warnings.catch_warnings():
        warnings.simplefilter("error", AmbiguousPrefixWarning)
        # Asked for: every key starting with the text, siblings included, a directory by that name or not.
        assert len(FluxMapDataset.from_prefix(url, storage_options=storage_options, bare_prefix=True)) == 10
        got = FluxShardDataset.from_prefix(f"flux://{siblings}/sh/train", storage_options=storage_options,
                                           bare_prefix=True)
        assert len(list(got)) == 10
        # One object named exactly (beside its index) stays what it was: that object, that shard.
        assert len(FluxShardDataset.from_prefix(f"flux://{siblings}/sh/train2/s-001.tar",
                                                storage_options=storage_options).catalog) == 1
        assert len(FluxMapDataset.from_prefix(f"flux://{siblings}/train2/1.bin", storage_options=storage_options)) == 1


def test_fluxfs_shard_packs_the_directory_a_bare_source_names(siblings, flux_server):
    from fluxfs.pipes.shards.packing import pack_prefix

    fs = make_fs(flux_server)
    res = pack_prefix(f"flux://{siblings}/train", f"flux://{siblings}/out/s-{{:03d}}.tar", fs=fs)
    assert (res.samples, res.objects) == (5, 5)

"""Resolving shard lists: prefix listing of *.tar, brace patterns, manifests; indexes and the missing-index warning."""
from __future__ import annotations

import json

import pytest

from fluxfs.pipes.shards import MissingIndexWarning, ShardError
from fluxfs.pipes.shards.catalog import ShardCatalog
from fluxfs.pipes.shards.catalog import expand_urls

from .conftest import COUNTS, put_shard, shard_bytes, shard_keys


@pytest.fixture
def options(flux_server) -> dict:
    return {"endpoint_url": flux_server.url, "token": "anon"}


def test_prefix_lists_tar_shards_and_warns_once_about_missing_indexes(shard_bucket, options):
    cat = ShardCatalog("prefix", f"flux://{shard_bucket}/ds/", storage_options=options)
    with pytest.warns(MissingIndexWarning, match=r"1 of 5 shard\(s\) have no index .*shard-000002\.tar\.idx"):
        shards = cat.shards
    assert [s.path for s in shards] == [f"{shard_bucket}/ds/shard-{i:06d}.tar" for i in range(5)]
    assert [s.has_index for s in shards] == [True, True, False, True, True]
    assert all(s.size > 0 and s.generation for s in shards)
    assert [len(cat.index(i).samples) for i in (0, 1, 3, 4)] == [COUNTS[i] for i in (0, 1, 3, 4)]
    assert cat.index(2) is None


def test_brace_patterns_expand_in_order(shard_bucket, options):
    assert expand_urls("b/s-{000..002}.tar") == ["b/s-000.tar", "b/s-001.tar", "b/s-002.tar"]
    cat = ShardCatalog("urls", f"flux://{shard_bucket}/ds/shard-{{000003..000004}}.tar", storage_options=options)
    assert [s.path[-10:] for s in cat.shards] == ["000003.tar", "000004.tar"]


def test_missing_shard_is_named(shard_bucket, options):
    cat = ShardCatalog("urls", [f"flux://{shard_bucket}/ds/shard-{{000000..000009}}.tar"], storage_options=options)
    with pytest.raises(FileNotFoundError, match=r"5 of 10 shard\(s\) do not exist: .*shard-000005\.tar"):
        cat.shards  # noqa: B018


def test_empty_prefix_and_bad_urls(shard_bucket, options):
    with pytest.raises(FileNotFoundError, match=r"no \.tar/\.tar\.gz/\.tgz shards under flux://.*/nothing/"):
        ShardCatalog("prefix", f"flux://{shard_bucket}/nothing/", storage_options=options).shards  # noqa: B018
    with pytest.raises(ValueError, match="does not name a shard object"):
        ShardCatalog("urls", [f"flux://{shard_bucket}/ds/"], storage_options=options).shards  # noqa: B018
    with pytest.raises(ValueError, match="mix protocols"):
        ShardCatalog("urls", ["flux://b/a.tar", "gs://b/b.tar"])


def test_manifest_of_shards(fs, shard_bucket, options, tmp_path):
    rows = [{"name": f"{shard_bucket}/ds/shard-{i:06d}.tar"} for i in (4, 0)]
    local = tmp_path / "shards.jsonl"
    local.write_text("".join(json.dumps(r) + "\n" for r in rows))
    cat = ShardCatalog("manifest", str(local), storage_options=options)
    assert [s.path[-10:] for s in cat.shards] == ["000004.tar", "000000.tar"] and all(s.has_index for s in cat.shards)
    text = f"flux://{shard_bucket}/shards.txt"
    fs.pipe(text, b"ds/shard-000001.tar\nds/shard-000002.tar\n")
    with pytest.warns(MissingIndexWarning):
        cat = ShardCatalog("manifest", text, base_url=f"flux://{shard_bucket}/", storage_options=options)
        assert [s.has_index for s in cat.shards] == [True, False]


def test_stale_index_is_refused_naming_the_shard(fs, bucket, options):
    path = f"{bucket}/s.tar"
    put_shard(fs, path, shard_bytes(shard_keys(0, 3)))
    fs.pipe(path, shard_bytes(shard_keys(0, 3)))  # replaced: same size, new generation
    cat = ShardCatalog("prefix", f"flux://{bucket}/", storage_options=options)
    with pytest.raises(ShardError, match=r"s\.tar: the shard was replaced after it was indexed"):
        cat.index(0)


def test_index_deleted_after_listing_is_an_error(fs, bucket, options):
    put_shard(fs, f"{bucket}/s.tar", shard_bytes(shard_keys(0, 3)))
    cat = ShardCatalog("prefix", f"flux://{bucket}/", storage_options=options)
    assert cat.shards[0].has_index
    fs.rm(f"{bucket}/s.tar.idx")
    with pytest.raises(ShardError, match=r"s\.tar\.idx: the index was deleted after the shards were listed"):
        cat.index(0)


def test_both_servers_list_and_read_shards(any_fs, any_bucket, gcs_server):
    from fluxfs.pipes.shards import FluxShardDataset

    put_shard(any_fs, f"{any_bucket}/p/a.tar", shard_bytes(shard_keys(0, 4)))
    with pytest.warns(MissingIndexWarning):
        any_fs.pipe(f"{any_bucket}/p/b.tar", shard_bytes(shard_keys(1, 2)))
        ds = FluxShardDataset.from_prefix(f"flux://{any_bucket}/p/", range_size=700,
                                          storage_options={"endpoint_url": gcs_server.url, "token": "anon"})
    assert [s["__key__"] for s in ds] == shard_keys(0, 4) + shard_keys(1, 2)


def test_only_the_last_indexes_used_stay_loaded(shard_bucket, options, flux_server, monkeypatch):
    monkeypatch.setattr("fluxfs.pipes.shards.catalog.INDEXES_KEPT", 2)
    with pytest.warns(MissingIndexWarning):
        cat = ShardCatalog("prefix", f"flux://{shard_bucket}/ds/", storage_options=options)
        cat.shards  # noqa: B018

    def reads(*shards):
        flux_server.reset_stats()
        for i in shards:
            cat.index(i)
        return flux_server.stats()["requests"].get("read", 0)

    assert reads(0, 1) == 2
    assert reads(1, 0) == 0  # both kept
    assert reads(3) == 1  # loads 3, drops 1 (used longest ago)
    assert reads(0, 3) == 0 and reads(1) == 1


def test_indexes_wanted_next_are_read_with_the_first_and_their_errors_wait(fs, bucket, options, flux_server):
    for name in ("a", "b", "c"):
        put_shard(fs, f"{bucket}/{name}.tar", shard_bytes(shard_keys(0, 3)))
    cat = ShardCatalog("prefix", f"flux://{bucket}/", storage_options=options)
    assert [s.has_index for s in cat.shards] == [True] * 3
    fs.rm(f"{bucket}/c.tar.idx")
    assert len(cat.index(0, ahead=[1, 2]).samples) == 3  # c's missing index is not a's error
    flux_server.reset_stats()
    assert len(cat.index(1).samples) == 3
    assert flux_server.stats()["requests"].get("read", 0) == 0  # read with a's
    with pytest.raises(ShardError, match=r"c\.tar\.idx: the index was deleted after the shards were listed"):
        cat.index(2)

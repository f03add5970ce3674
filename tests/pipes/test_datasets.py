"""FluxMapDataset and FluxIterableDataset with a real DataLoader against the fluxfs server."""
from __future__ import annotations

import json
from collections import Counter

import pytest
from torch.utils.data import DataLoader

from fluxfs.pipes import FluxIterableDataset, FluxMapDataset, ObjectMeta
from fluxfs.pipes.data import AmbiguousPrefixWarning

from .conftest import N_DATA, N_SMALL, expected_bytes


def key_size_label(data: bytes, meta: ObjectMeta):
    """A transform returning what the tests check (module level: picklable for spawned workers)."""
    return meta.key, data, meta.size, -1 if meta.label is None else meta.label


def collect(loader) -> Counter:
    """Keys seen across all batches, with bytes checked exactly against what the server generated."""
    seen: Counter = Counter()
    for keys, datas in loader:
        for key, data in zip(keys, datas):
            assert data == expected_bytes(key), f"wrong bytes for {key}"
            seen[key] += 1
    return seen


def all_keys(prefix: str, n: int) -> Counter:
    return Counter(f"{prefix}{i:08d}" for i in range(n))


@pytest.mark.parametrize("batch_size", [64, 256])
@pytest.mark.parametrize("num_workers", [0, 2])
def test_map_dataset_dataloader_reads_every_object_once(flux_server, data_bucket, storage_options, num_workers,
                                                        batch_size):
    ds = FluxMapDataset.from_prefix(f"flux://{data_bucket}/data/", storage_options=storage_options)
    assert len(ds) == N_DATA
    flux_server.reset_stats()
    loader = DataLoader(ds, batch_size=batch_size, shuffle=True, num_workers=num_workers)
    assert collect(loader) == all_keys("data/", N_DATA)
    requests = flux_server.stats()["requests"]
    # The listing ran once, in this process, before the workers started: none of them listed again.
    assert requests.get("list", 0) == 0
    if batch_size <= 64:
        # A batch that fits in one wave of concurrent GETs (read concurrency 64) is read directly:
        # one round trip instead of compose + GET + delete.
        assert requests.get("compose", 0) == 0 and requests["read"] == N_DATA
    else:
        # Bigger batches are one batched read through composites of up to 32 objects.
        assert 0 < requests["compose"] and requests["read"] <= N_DATA // 16


def test_map_dataset_respects_an_explicit_compose_threshold(flux_server, data_bucket, storage_options):
    options = {**storage_options, "compose_threshold": 256 * 2**10}
    ds = FluxMapDataset.from_prefix(f"flux://{data_bucket}/small/", storage_options=options)
    flux_server.reset_stats()
    assert collect(DataLoader(ds, batch_size=64, num_workers=0)) == all_keys("small/", N_SMALL)
    requests = flux_server.stats()["requests"]
    assert 0 < requests["compose"] and requests["read"] <= N_SMALL // 16


@pytest.mark.parametrize("num_workers", [0, 2])
def test_iterable_dataset_dataloader_reads_every_object_once(flux_server, data_bucket, storage_options,
                                                            num_workers):
    ds = FluxIterableDataset.from_prefix(f"flux://{data_bucket}/data/", storage_options=storage_options,
                                         shuffle=True, seed=3)
    flux_server.reset_stats()
    loader = DataLoader(ds, batch_size=64, num_workers=num_workers)
    assert collect(loader) == all_keys("data/", N_DATA)
    assert flux_server.stats()["requests"].get("list", 0) == 0  # forked workers did not list again


def test_getitems_returns_one_sample_per_index_in_order(data_bucket, storage_options):
    ds = FluxMapDataset.from_prefix(f"flux://{data_bucket}/small/", storage_options=storage_options,
                                    transform=key_size_label)
    got = ds.__getitems__([5, 0, 5, -1])
    assert [g[0] for g in got] == ["small/00000005", "small/00000000", "small/00000005", f"small/{N_SMALL - 1:08d}"]
    for key, data, size, _ in got:
        assert data == expected_bytes(key) and size == len(data)
    assert ds[7][0] == "small/00000007"
    with pytest.raises(IndexError):
        ds[N_SMALL]


def order_of(ds) -> list[str]:
    return [key for key, _ in ds]


def test_shuffle_differs_per_epoch_and_repeats_for_the_same_seed(data_bucket, storage_options):
    def make(seed):
        return FluxIterableDataset.from_prefix(f"flux://{data_bucket}/small/", storage_options=storage_options,
                                               shuffle=True, seed=seed)

    ds = make(0)
    epoch0 = order_of(ds)
    ds.set_epoch(1)
    epoch1 = order_of(ds)
    assert sorted(epoch0) == sorted(epoch1) == sorted(all_keys("small/", N_SMALL))
    assert epoch0 != epoch1
    assert epoch0 != sorted(epoch0)  # shuffled at all
    again = make(0)
    assert order_of(again) == epoch0
    again.set_epoch(1)
    assert order_of(again) == epoch1
    assert order_of(make(1)) != epoch0


def test_explicit_rank_and_world_size_shard_disjoint_and_complete(data_bucket, storage_options):
    def shares(**kwargs):
        url = f"flux://{data_bucket}/small/"
        return [order_of(FluxIterableDataset.from_prefix(url, storage_options=storage_options, rank=r, world_size=3,
                                                         **kwargs)) for r in range(3)]

    once = shares(shuffle=True, drop_uneven=None)  # neither padded nor dropped: each object once
    assert sum(once, []) and Counter(sum(once, [])) == all_keys("small/", N_SMALL)
    assert max(map(len, once)) - min(map(len, once)) <= 1
    padded = shares(shuffle=True)  # the default under a world size > 1: equal counts, the first objects repeated
    per = -(-N_SMALL // 3)
    assert [len(p) for p in padded] == [per] * 3 and set(sum(padded, [])) == set(all_keys("small/", N_SMALL))
    even = [order_of(FluxIterableDataset.from_prefix(f"flux://{data_bucket}/small/", storage_options=storage_options,
                                                     rank=r, world_size=3, drop_uneven=True)) for r in range(3)]
    assert [len(e) for e in even] == [N_SMALL // 3] * 3
    assert len(set(sum(even, []))) == N_SMALL // 3 * 3


def test_empty_prefix_raises_naming_the_url(data_bucket, storage_options):
    url = f"flux://{data_bucket}/nothing-here/"
    lazy = FluxMapDataset.from_prefix(url, storage_options=storage_options)  # map-style lists on first use
    with pytest.raises(FileNotFoundError, match=url):
        len(lazy)
    with pytest.raises(FileNotFoundError, match=url):
        FluxIterableDataset.from_prefix(url, storage_options=storage_options)


def test_prefix_is_a_key_prefix_not_a_directory(data_bucket, storage_options):
    ds = FluxMapDataset.from_prefix(f"flux://{data_bucket}/small/0000001", storage_options=storage_options)
    with pytest.warns(AmbiguousPrefixWarning, match="names no directory"):  # tests/pipes/test_prefixes.py
        assert len(ds) == 10  # small/00000010 .. small/00000019


def test_from_objects_and_missing_policy(data_bucket, storage_options):
    urls = [f"flux://{data_bucket}/small/{i:08d}" for i in (3, 1, 2)]
    ds = FluxMapDataset.from_objects(urls, storage_options=storage_options, transform=key_size_label)
    assert [ds[i][0] for i in range(len(ds))] == ["small/00000001", "small/00000002", "small/00000003"]
    gone = f"flux://{data_bucket}/small/does-not-exist"
    with pytest.raises(FileNotFoundError, match=gone):
        len(FluxMapDataset.from_objects(urls + [gone], storage_options=storage_options))
    skipping = FluxIterableDataset.from_objects(urls + [gone], storage_options=storage_options, on_missing="skip")
    assert sorted(order_of(skipping)) == ["small/00000001", "small/00000002", "small/00000003"]
    assert skipping.missing == [gone]


def json_manifest(fs, bucket: str, prefix: str) -> list[dict]:
    """Manifest rows as `fs.write_manifest` writes them: one JSON object per line."""
    infos = fs.find(f"{bucket}/{prefix}", detail=True).values()
    return [{"name": i["name"], "size": i["size"], "generation": i["generation"], "crc32c": i["crc32c"]}
            for i in infos]


@pytest.mark.parametrize("where", ["local", "bucket"])
def test_json_lines_manifest(fs, data_bucket, storage_options, tmp_path, where):
    rows = json_manifest(fs, data_bucket, "small/")
    text = "".join(json.dumps(r) + "\n" for r in rows)
    if where == "local":
        path = tmp_path / "manifest.jsonl"
        path.write_text(text)
        path = str(path)
    else:
        path = f"flux://{data_bucket}/manifests/small.jsonl"
        fs.pipe(path, text.encode())
    ds = FluxMapDataset.from_manifest(path, storage_options=storage_options, transform=key_size_label)
    assert len(ds) == N_SMALL
    loader = DataLoader(ds, batch_size=50, num_workers=0, collate_fn=list)
    got = [s for batch in loader for s in batch]
    assert Counter(s[0] for s in got) == all_keys("small/", N_SMALL)
    assert all(data == expected_bytes(key) and size == len(data) for key, data, size, _ in got)


def test_json_manifest_naming_a_missing_object(fs, data_bucket, storage_options, tmp_path):
    rows = sorted(json_manifest(fs, data_bucket, "small/"), key=lambda r: r["name"])[:10]
    assert len(rows) == 10
    gone = {"name": f"{data_bucket}/small/vanished", "size": 100, "generation": "1", "crc32c": "AAAAAA=="}
    path = tmp_path / "m.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows + [gone]))
    with pytest.raises(FileNotFoundError, match="small/vanished"):
        list(FluxIterableDataset.from_manifest(str(path), storage_options=storage_options))
    skipping = FluxIterableDataset.from_manifest(str(path), storage_options=storage_options, on_missing="skip")
    assert sorted(order_of(skipping)) == [f"small/{i:08d}" for i in range(10)]
    assert skipping.missing == [f"flux://{data_bucket}/small/vanished"]


def test_tab_manifest_with_labels(data_bucket, storage_options, tmp_path):
    lines = [f"small/{i:08d}\t{i % 10}" for i in range(0, N_SMALL, 2)]
    path = tmp_path / "labels.txt"
    path.write_text("\n".join(lines) + "\n")
    ds = FluxMapDataset.from_manifest(str(path), base_url=f"flux://{data_bucket}/", storage_options=storage_options,
                                      transform=key_size_label)
    assert len(ds) == N_SMALL // 2
    loader = DataLoader(ds, batch_size=32, num_workers=2, collate_fn=list)
    got = {key: (data, label) for batch in loader for key, data, _, label in batch}
    assert set(got) == {f"small/{i:08d}" for i in range(0, N_SMALL, 2)}
    for key, (data, label) in got.items():
        assert data == expected_bytes(key)
        assert label == int(key[-8:]) % 10


def test_tab_manifest_missing_object_raises_or_is_skipped(data_bucket, storage_options, tmp_path):
    path = tmp_path / "labels.txt"
    path.write_text(f"flux://{data_bucket}/small/00000001\tcat\nflux://{data_bucket}/small/nope\tdog\n")
    with pytest.raises(FileNotFoundError, match="small/nope"):
        len(FluxMapDataset.from_manifest(str(path), storage_options=storage_options))
    ds = FluxMapDataset.from_manifest(str(path), storage_options=storage_options, on_missing="skip",
                                      transform=key_size_label)
    assert len(ds) == 1 and ds[0][0] == "small/00000001" and ds[0][3] == "cat"
    assert ds.missing == [f"flux://{data_bucket}/small/nope"]


def test_bad_arguments_are_rejected_clearly(storage_options):
    with pytest.raises(ValueError, match="on_missing"):
        FluxMapDataset.from_objects(["flux://b/k"], on_missing="ignore")
    with pytest.raises(ValueError, match="bucket"):
        FluxMapDataset.from_prefix("flux:///x", storage_options=storage_options)
    with pytest.raises(ValueError, match="read_batch"):
        FluxIterableDataset.from_prefix("flux://b/x", read_batch=0)


def test_any_fsspec_filesystem_without_fluxfs_accelerations():
    """The datasets and nodes fall back to find/cat on filesystems without iter_objects/cat_objects."""
    import fsspec

    from fluxfs.pipes import ListObjects, ReadObjects

    mem = fsspec.filesystem("memory")
    root = "pipes-fallback-test"
    try:
        for key, body in {"a/1": b"x", "a/2": b"yy", "ab": b"not under a/", "b/1": b"z"}.items():
            mem.pipe(f"/{root}/{key}", body)
        ds = FluxMapDataset.from_prefix(f"memory://{root}/a/")
        assert [ds[i] for i in range(len(ds))] == [("a/1", b"x"), ("a/2", b"yy")]
        assert list(FluxIterableDataset.from_objects([f"memory://{root}/b/1", f"memory://{root}/a/2"])) == [
            ("a/2", b"yy"), ("b/1", b"z")]
        assert list(ReadObjects(ListObjects(f"memory://{root}/a"), protocol="memory")) == [
            ("a/1", b"x"), ("a/2", b"yy"), ("ab", b"not under a/")]
    finally:
        mem.rm(f"/{root}", recursive=True)


def test_reads_survive_injected_faults_and_leave_no_temporary_objects(flux_server, data_bucket, storage_options):
    ds = FluxMapDataset.from_prefix(f"flux://{data_bucket}/small/", storage_options=storage_options)
    len(ds)
    flux_server.configure(fail_rate=0.1, fail_codes=(503, 429), seed=5)
    assert collect(DataLoader(ds, batch_size=40, num_workers=0)) == all_keys("small/", N_SMALL)
    assert flux_server.stats()["faults"], "no fault was injected: the test proved nothing"
    flux_server.configure(profile="local")
    assert [n for n in flux_server.list_names(data_bucket) if not n.startswith(("data/", "small/", "manifests/"))] == []


def test_set_epoch_reaches_persistent_workers(data_bucket, storage_options):
    """With persistent_workers=True each epoch still has its own order: the one fresh workers would read."""
    ds = FluxIterableDataset.from_prefix(f"flux://{data_bucket}/small/", storage_options=storage_options,
                                         shuffle=True, seed=2)

    def epoch_keys(loader, epoch):
        ds.set_epoch(epoch)
        return [k for keys, _ in loader for k in keys]

    persistent = DataLoader(ds, batch_size=16, num_workers=2, persistent_workers=True)
    got = [epoch_keys(persistent, e) for e in (0, 1, 2)]
    fresh = [epoch_keys(DataLoader(ds, batch_size=16, num_workers=2), e) for e in (0, 1, 2)]
    assert got == fresh
    assert got[0] != got[1] != got[2] and sorted(got[0]) == sorted(got[2])


@pytest.mark.parametrize("old,new", [((1, 0), (2, 3)), ((2, 2), (3, 1)), ((3, 1), (1, 2))])
def test_elastic_resume_reads_every_remaining_object_once(data_bucket, storage_options, old, new):
    """Checkpointed at world size A x workers W, resumed at B x V: every object of the epoch exactly once."""
    from torchdata.stateful_dataloader import StatefulDataLoader

    from fluxfs.pipes.data.epochs import reader_states

    def make(rank, world_size):
        return FluxIterableDataset.from_prefix(f"flux://{data_bucket}/small/", storage_options=storage_options,
                                               shuffle=True, seed=4, rank=rank, world_size=world_size, read_batch=8,
                                               drop_uneven=None)

    head, states = [], []
    for rank in range(old[0]):
        loader = StatefulDataLoader(make(rank, old[0]), batch_size=10, num_workers=old[1])
        batches = iter(loader)
        head += [k for _ in range(rank + 2) for k in next(batches)[0]]  # ranks stop at different points
        states.append(loader.state_dict())
        del batches
    rest = []
    for rank in range(new[0]):
        ds = make(rank, new[0])
        ds.load_state_dict({"readers": reader_states(*states)})
        rest += [k for keys, _ in DataLoader(ds, batch_size=10, num_workers=new[1]) for k in keys]
    assert Counter(head + rest) == all_keys("small/", N_SMALL)


def test_resume_on_another_layout_without_gathering_is_refused(data_bucket, storage_options):
    ds = FluxIterableDataset.from_prefix(f"flux://{data_bucket}/small/", storage_options=storage_options,
                                         rank=0, world_size=2)
    next(iter(ds))
    other = FluxIterableDataset.from_prefix(f"flux://{data_bucket}/small/", storage_options=storage_options)
    other.load_state_dict(ds.state_dict())
    with pytest.raises(ValueError, match=r"saved by reader 0 of 2 .*this is reader 0 of 1\. To resume on another"):
        iter(other)


def test_iterable_resume_at_many_positions_yields_exactly_the_rest(data_bucket, storage_options):
    def make():
        return FluxIterableDataset.from_prefix(f"flux://{data_bucket}/small/", storage_options=storage_options,
                                               shuffle=True, seed=8, rank=1, world_size=2, read_batch=8)

    full = order_of(make())
    assert len(full) == N_SMALL // 2
    for k in list(range(0, 20)) + list(range(20, len(full) + 1, 9)):
        ds = make()
        it = iter(ds)
        head = [next(it)[0] for _ in range(k)]
        again = make()
        again.load_state_dict(ds.state_dict())
        assert head + order_of(again) == full, f"resumed after {k}"

"""FluxMapDataset with its own sampler: workers read their coming batches ahead, and every sample is still exact."""
from __future__ import annotations

import time

import pytest
from torch.utils.data import DataLoader, RandomSampler

from fluxfs.pipes import FluxMapDataset, FluxSampler
from fluxfs.pipes.data.readahead import ReadAhead

from .conftest import N_DATA, N_SMALL
from .test_datasets import all_keys, collect


def keys_in_order(loader) -> list[str]:
    return [k for keys, _ in loader for k in keys]


def assert_no_temporaries(flux_server, bucket: str) -> None:
    # Reads guessed wrong finish (and delete their composites) on their own: give them a moment.
    deadline = time.monotonic() + 10
    while flux_server.list_names(bucket, "_fluxfs-tmp/") and time.monotonic() < deadline:
        time.sleep(0.05)
    assert flux_server.list_names(bucket, "_fluxfs-tmp/") == []


@pytest.mark.parametrize("num_workers", [0, 2])
def test_read_ahead_serves_every_object_once_with_exact_bytes(flux_server, data_bucket, storage_options,
                                                              num_workers):
    ds = FluxMapDataset.from_prefix(f"flux://{data_bucket}/data/", storage_options=storage_options)
    sampler = ds.sampler(shuffle=True, seed=3)
    flux_server.reset_stats()
    loader = DataLoader(ds, batch_size=32, sampler=sampler, num_workers=num_workers)
    assert collect(loader) == all_keys("data/", N_DATA)
    # Batches of 32 are read directly unless read ahead, which goes through composites: compose
    # requests prove the workers read ahead (each worker's first batch is read directly).
    requests = flux_server.stats()["requests"]
    assert requests.get("compose", 0) > 0
    assert requests["read"] < N_DATA // 2
    assert_no_temporaries(flux_server, data_bucket)


def test_sampler_order_is_fixed_by_seed_and_epoch(flux_server, data_bucket, storage_options):
    ds = FluxMapDataset.from_prefix(f"flux://{data_bucket}/small/", storage_options=storage_options)
    sampler = ds.sampler(shuffle=True, seed=1)
    loader = DataLoader(ds, batch_size=16, sampler=sampler, num_workers=2)
    first = keys_in_order(loader)
    sampler.set_epoch(1)
    second = keys_in_order(loader)
    sampler.set_epoch(0)
    again = keys_in_order(loader)
    assert sorted(first) == sorted(second) == [f"small/{i:08d}" for i in range(N_SMALL)]
    assert first != second and first == again
    assert list(FluxSampler(5, shuffle=False)) == [0, 1, 2, 3, 4]


def test_persistent_workers_follow_the_epochs(flux_server, data_bucket, storage_options):
    ds = FluxMapDataset.from_prefix(f"flux://{data_bucket}/data/", storage_options=storage_options)
    sampler = ds.sampler(shuffle=True, seed=5)
    loader = DataLoader(ds, batch_size=64, sampler=sampler, num_workers=2, persistent_workers=True)
    for epoch in range(2):
        sampler.set_epoch(epoch)
        flux_server.reset_stats()
        assert collect(loader) == all_keys("data/", N_DATA)
        # The workers were started with epoch 0's sampler and still read epoch 1 ahead.
        assert flux_server.stats()["requests"].get("compose", 0) > 0, f"no read-ahead in epoch {epoch}"
    assert_no_temporaries(flux_server, data_bucket)


def test_another_sampler_reads_as_before(flux_server, data_bucket, storage_options):
    ds = FluxMapDataset.from_prefix(f"flux://{data_bucket}/data/", storage_options=storage_options)
    ds.sampler(shuffle=True, seed=3)  # made, but the DataLoader draws from another order
    flux_server.reset_stats()
    loader = DataLoader(ds, batch_size=32, sampler=RandomSampler(range(N_DATA)), num_workers=2)
    assert collect(loader) == all_keys("data/", N_DATA)
    requests = flux_server.stats()["requests"]
    assert requests.get("compose", 0) == 0 and requests["read"] == N_DATA   # no guess ever matched


def test_read_ahead_off_and_spawned_workers(flux_server, data_bucket, storage_options):
    ds = FluxMapDataset.from_prefix(f"flux://{data_bucket}/small/", storage_options=storage_options)
    flux_server.reset_stats()
    loader = DataLoader(ds, batch_size=16, sampler=ds.sampler(read_ahead=0), num_workers=0)
    assert collect(loader) == all_keys("small/", N_SMALL)
    assert flux_server.stats()["requests"].get("compose", 0) == 0
    # The dataset used in this process (its read-ahead has a thread pool) still pickles for spawn.
    loader = DataLoader(ds, batch_size=16, sampler=ds.sampler(), num_workers=0)
    next(iter(loader))
    loader = DataLoader(ds, batch_size=16, sampler=ds.sampler(), num_workers=2, multiprocessing_context="spawn")
    assert collect(loader) == all_keys("small/", N_SMALL)
    with pytest.raises(ValueError, match="read_ahead must be >= 0 batches, not -1"):
        ds.sampler(read_ahead=-1)


def test_guesses_bounded_by_depth_and_bytes():
    sampler = FluxSampler(100, shuffle=False, read_ahead=4)
    ahead = ReadAhead(sampler, batch_bytes=lambda b: 10 * len(b), max_bytes=250)
    started: list[list[int]] = []
    ahead.start_next(list(range(10, 20)), workers=2, read=lambda b: started.append(b) or {})
    # Batch 1 of 10 with 2 workers: this worker's next ones are batches 3, 5, 7 (100 bytes each,
    # so the 250-byte cap stops before the third; the depth of 4 would have allowed it).
    ahead._pool.shutdown(wait=True)
    assert sorted(started) == [list(range(30, 40)), list(range(50, 60))]
    assert ahead.take(list(range(30, 40))) == {}
    assert ahead.take(list(range(40, 50))) is None   # never guessed
    ahead.start_next([5, 7, 9], workers=1, read=lambda b: {})  # not a batch of this order: no guess
    assert list(ahead._pending) == [tuple(range(50, 60))]

"""Read threads end with their node or iteration: `ReadObjects.shutdown()`, deletion, exhaustion, a closed iterator."""
from __future__ import annotations

import gc
import threading
import time
from itertools import islice

import pytest

from fluxfs.pipes import FluxIterableDataset, ListObjects, ReadObjects

from .conftest import N_SMALL

READ_THREADS = "fluxfs-read"


def read_threads() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if t.name.startswith(READ_THREADS)}


def alive(threads: set[threading.Thread], within: float = 0.0) -> set[threading.Thread]:
    """Those of `threads` still running after up to `within` seconds."""
    deadline = time.monotonic() + within
    while any(t.is_alive() for t in threads) and time.monotonic() < deadline:
        time.sleep(0.01)
    return {t for t in threads if t.is_alive()}


def started_node(data_bucket: str, storage_options: dict) -> tuple[ReadObjects, set[threading.Thread]]:
    """A ReadObjects a few items in, with reads in flight, and the read threads it started."""
    before = read_threads()
    node = ReadObjects(ListObjects(f"flux://{data_bucket}/data/", storage_options=storage_options),
                       storage_options=storage_options, batch_size=8, prefetch=4)
    assert len(list(islice(node, 3))) == 3
    started = read_threads() - before
    assert 1 <= len(started) <= 4, started
    return node, started


def test_shutdown_stops_read_threads(data_bucket, storage_options):
    node, started = started_node(data_bucket, storage_options)
    state = node.state_dict()
    node.shutdown()
    assert not alive(started)  # shutdown() waits for them
    node.shutdown()  # idempotent
    with pytest.raises(RuntimeError, match="shut down"):
        next(node)
    assert node.state_dict() == state  # still says where it got to

    before = read_threads()
    node.reset(state)  # reads again, with new threads
    assert len(list(islice(node, 5))) == 5
    restarted = read_threads() - before
    assert restarted
    node.shutdown()
    assert not alive(restarted)


def test_deleted_node_leaves_no_threads(data_bucket, storage_options):
    node, started = started_node(data_bucket, storage_options)
    del node
    gc.collect()
    assert not alive(started, within=5)


def test_exhausted_node_leaves_no_threads(data_bucket, storage_options):
    before = read_threads()
    node = ReadObjects(ListObjects(f"flux://{data_bucket}/small/", storage_options=storage_options),
                       storage_options=storage_options, batch_size=16, prefetch=4)
    assert len(list(node)) == N_SMALL
    assert not alive(read_threads() - before, within=5)
    with pytest.raises(StopIteration):
        next(node)  # still the end, not an error


def test_closed_dataset_iterator_leaves_no_threads(data_bucket, storage_options):
    before = read_threads()
    dataset = FluxIterableDataset.from_prefix(f"flux://{data_bucket}/data/", storage_options=storage_options,
                                              read_batch=8, prefetch=4)
    it = iter(dataset)
    assert len(list(islice(it, 3))) == 3
    started = read_threads() - before
    assert started
    it.close()
    assert not alive(started, within=5)

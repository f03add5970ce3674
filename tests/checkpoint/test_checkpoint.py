"""FluxCheckpoint against the fluxfs server: round trips, weights_only, background saves and their failures."""
from __future__ import annotations

import collections
import concurrent.futures
import logging
import pickle
import random
import threading
import time

import pytest
import torch

from fluxfs.pipes.checkpoint import CheckpointSaveError, FluxCheckpoint
from fluxfs.pipes.checkpoint.snapshot import snapshot


class Trusted:
    """A non-tensor object: loading it needs weights_only=False."""

    def __init__(self, value):
        self.value = value


def training_state(seed: int = 0) -> dict:
    """Model + optimizer + scheduler + RNG state, as a training loop checkpoints them."""
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
    for _ in range(3):
        loss = model(torch.randn(4, 8)).pow(2).sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
    return {
        "model": model.state_dict(),
        "optimizer": opt.state_dict(),
        "scheduler": sched.state_dict(),
        "rng": {"torch": torch.get_rng_state(), "python": random.getstate()},
        "step": 3,
        "tags": ["a", ("b", 2)],
    }


def assert_same(a, b):
    assert type(a) is type(b) or (isinstance(a, dict) and isinstance(b, dict)), (type(a), type(b))
    if isinstance(a, torch.Tensor):
        assert a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b)
    elif isinstance(a, dict):
        assert list(a) == list(b)
        for k in a:
            assert_same(a[k], b[k])
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b)
        for x, y in zip(a, b):
            assert_same(x, y)
    else:
        assert a == b


@pytest.fixture
def ckpt(flux_server):
    c = FluxCheckpoint(endpoint_url=flux_server.url, token="anon", skip_instance_cache=True)
    yield c
    c.close()


def test_round_trip_nested_training_state(ckpt, bucket, flux_server):
    state = training_state()
    url = f"flux://{bucket}/run/step-3.pt"
    ckpt.save(state, url)
    loaded = ckpt.load(url)
    assert_same(state, loaded)
    assert flux_server.list_names(bucket, "run/") == ["run/step-3.pt"]
    # The model state dict is still usable as one.
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))
    model.load_state_dict(loaded["model"])


def test_writer_reader_handles_work_with_torch(ckpt, bucket):
    tensor = torch.arange(3_000_000, dtype=torch.float32)  # 12 MB: several parts
    url = f"flux://{bucket}/raw.pt"
    with ckpt.writer(url) as f:
        torch.save({"t": tensor}, f)
    with ckpt.reader(url) as f:
        loaded = torch.load(f, weights_only=True)
    assert torch.equal(loaded["t"], tensor)


def test_weights_only_default_refuses_arbitrary_objects(ckpt, bucket):
    url = f"flux://{bucket}/pickled.pt"
    ckpt.save({"obj": Trusted(41)}, url)
    with pytest.raises(pickle.UnpicklingError, match="weights_only=False") as info:
        ckpt.load(url)
    assert url in str(info.value)
    assert ckpt.load(url, weights_only=False)["obj"].value == 41


def test_missing_checkpoint_and_bad_urls(ckpt, bucket):
    with pytest.raises(FileNotFoundError):
        ckpt.load(f"flux://{bucket}/nope.pt")
    with pytest.raises(ValueError, match="flux://"):
        ckpt.save({}, "s3://other/x.pt")
    with pytest.raises(ValueError, match="object name"):
        ckpt.save({}, f"flux://{bucket}")


def test_failed_save_leaves_previous_checkpoint_intact(ckpt, bucket, flux_server):
    url = f"flux://{bucket}/model.pt"
    ckpt.save({"w": torch.ones(3)}, url)
    with pytest.raises((pickle.PicklingError, AttributeError, TypeError)):
        ckpt.save({"w": torch.zeros(4_000_000), "bad": lambda: None}, url)  # a lambda cannot be pickled
    assert torch.equal(ckpt.load(url)["w"], torch.ones(3))
    assert flux_server.list_names(bucket) == ["model.pt"]


def test_snapshot_copies_tensors_and_keeps_structure():
    weight = torch.nn.Parameter(torch.ones(3))
    sd = collections.OrderedDict(w=weight, tied=weight, n=[torch.zeros(2)])
    sd._metadata = {"": {"version": 1}}
    snap = snapshot(sd)
    with torch.no_grad():
        weight.add_(1)
        sd["n"][0].add_(5)
    assert isinstance(snap, collections.OrderedDict) and snap._metadata == {"": {"version": 1}}
    assert torch.equal(snap["w"], torch.ones(3)) and snap["w"] is snap["tied"]
    assert torch.equal(snap["n"][0], torch.zeros(2))


def test_async_save_snapshots_before_returning(ckpt, bucket, flux_server):
    flux_server.configure(latency_ms=50)  # the upload is still running while training mutates
    model = torch.nn.Linear(256, 256)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    url = f"flux://{bucket}/async.pt"
    future = ckpt.save_async({"model": model.state_dict()}, url)
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(-3).add_(1)
    assert future.result(timeout=60) is None
    saved = ckpt.load(url)["model"]
    for k in before:
        assert torch.equal(saved[k], before[k])
        assert not torch.equal(saved[k], model.state_dict()[k])


def test_async_failure_raised_and_logged(flux_server, bucket, caplog):
    flux_server.configure(fail_rate=1.0, fail_ops={"write"})
    ckpt = FluxCheckpoint(
        endpoint_url=flux_server.url,
        token="anon",
        skip_instance_cache=True,
        retry={"write": {"max_attempts": 2, "initial": 0.01}},
    )
    url = f"flux://{bucket}/doomed.pt"
    with caplog.at_level(logging.ERROR, logger="fluxfs.pipes.checkpoint"):
        future = ckpt.save_async({"w": torch.ones(1000)}, url)
        with pytest.raises(CheckpointSaveError, match=url) as info:
            future.result(timeout=60)
    assert info.value.__cause__ is not None
    assert any(url in r.getMessage() for r in caplog.records)
    with pytest.raises(CheckpointSaveError):
        ckpt.wait()
    ckpt.close()
    flux_server.configure(fail_rate=0.0)
    assert flux_server.list_names(bucket) == []  # nothing partial left behind


def test_same_url_saves_complete_in_submission_order(ckpt, bucket, flux_server):
    flux_server.configure(latency_ms=20)
    url = f"flux://{bucket}/latest.pt"
    done_order = []
    lock = threading.Lock()
    futures = []
    # The first save is the biggest: without ordering it would finish last and win.
    for i, n in enumerate([2_000_000, 1000, 10, 1]):
        f = ckpt.save_async({"i": i, "w": torch.full((n,), float(i))}, url)
        f.add_done_callback(lambda _f, i=i: (lock.acquire(), done_order.append(i), lock.release()))
        futures.append(f)
    concurrent.futures.wait(futures, timeout=120)
    for f in futures:
        f.result()
    assert done_order == [0, 1, 2, 3]
    assert ckpt.load(url)["i"] == 3


def test_in_flight_saves_are_bounded(flux_server, bucket):
    flux_server.configure(latency_ms=300)
    ckpt = FluxCheckpoint(endpoint_url=flux_server.url, token="anon", skip_instance_cache=True, max_in_flight=1)
    try:
        t0 = time.monotonic()
        first = ckpt.save_async({"w": torch.ones(10)}, f"flux://{bucket}/a.pt")
        assert time.monotonic() - t0 < 0.25  # returns before the upload
        second = ckpt.save_async({"w": torch.ones(10)}, f"flux://{bucket}/b.pt")
        # The second call had to wait for the only slot: the first save was done by then.
        assert first.done()
        second.result(timeout=60)
    finally:
        ckpt.close()
    assert sorted(flux_server.list_names(bucket)) == ["a.pt", "b.pt"]

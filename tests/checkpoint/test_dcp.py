"""torch.distributed.checkpoint through FluxStorageWriter/FluxStorageReader against the fluxfs server."""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.default_planner import DefaultLoadPlanner

from fluxfs.pipes.dcp import CheckpointChangedError, FluxStorageReader, FluxStorageWriter, IncompleteCheckpointError
from tests.conftest import server_options

from .dcp_worker import expected

WORKER = Path(__file__).with_name("dcp_worker.py")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def worker_env(port: int | None = None) -> dict:
    env = dict(os.environ, OMP_NUM_THREADS="1", GLOO_SOCKET_IFNAME="lo", MASTER_ADDR="127.0.0.1")
    if port is not None:
        env["MASTER_PORT"] = str(port)
    return env


def run_ranks(mode: str, url: str, endpoint: str, world: int = 2, timeout: float = 120) -> None:
    """Run `world` worker processes of one gloo group to completion; fail with their output if any fails."""
    port = free_port()
    procs = [
        subprocess.Popen(
            [sys.executable, str(WORKER), mode, url, endpoint, str(rank), str(world)],
            env=worker_env(port),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        for rank in range(world)
    ]
    outputs = []
    try:
        for p in procs:
            out, _ = p.communicate(timeout=timeout)
            outputs.append(out.decode(errors="replace"))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    for rank, (p, out) in enumerate(zip(procs, outputs)):
        assert p.returncode == 0, f"rank {rank} of {mode} exited {p.returncode}:\n{out[-3000:]}"


def test_single_process_round_trip_and_partial_load(flux_server, bucket):
    url = f"flux://{bucket}/ckpt/one"
    state = {
        "big": torch.randn(512, 1024),  # 2 MiB
        "small": {"a": torch.arange(10), "b": torch.ones(3, dtype=torch.bfloat16)},
        "meta": {"epoch": 3, "name": "run-1"},
    }
    dcp.save(state, storage_writer=FluxStorageWriter(url, **server_options(flux_server)))
    names = flux_server.list_names(bucket, "ckpt/one/")
    assert "ckpt/one/.metadata" in names and any(n.endswith(".distcp") for n in names)
    assert not any(n.endswith(".tmp") for n in names)

    target = {"big": torch.zeros(512, 1024), "small": {"a": torch.zeros(10, dtype=torch.int64),
              "b": torch.zeros(3, dtype=torch.bfloat16)}, "meta": {"epoch": 0, "name": ""}}
    # checkpoint_id makes dcp call reset(url): the storage options must survive it (checked first,
    # so a regression fails here instead of reaching for the default endpoint).
    reader = FluxStorageReader(url, **server_options(flux_server))
    reader.reset(url)
    assert reader.fs.fs.storage_options["endpoint_url"] == flux_server.url
    dcp.load(target, checkpoint_id=url, storage_reader=reader)
    assert torch.equal(target["big"], state["big"])
    assert torch.equal(target["small"]["a"], state["small"]["a"])
    assert torch.equal(target["small"]["b"], state["small"]["b"])
    assert target["meta"] == {"epoch": 3, "name": "run-1"}

    # Loading one small tensor fetches its bytes, not the 2 MiB file.
    flux_server.reset_stats()
    part = {"small": {"a": torch.zeros(10, dtype=torch.int64)}}
    dcp.load(part, storage_reader=FluxStorageReader(url, max_gap=0, **server_options(flux_server)))
    assert torch.equal(part["small"]["a"], state["small"]["a"])
    assert flux_server.stats()["bytes_out"] < 256 * 1024


def test_items_spanning_many_chunks_and_windows_load_exactly(flux_server, bucket):
    """Tiny GETs and windows: every item is read across several received chunks, none joined first."""
    url = f"flux://{bucket}/ckpt/chunks"
    g = torch.Generator().manual_seed(7)
    state = {
        "w": torch.randn(300, 257, generator=g),            # ~300 KiB: dozens of 8 KiB chunks
        "b": torch.randint(0, 255, (12_345,), dtype=torch.uint8, generator=g),
        "h": torch.randn(77, generator=g).to(torch.bfloat16),
        "meta": {"step": 12, "tags": ["a", "b"]},          # a pickled (BYTE_IO) item
    }
    dcp.save(state, storage_writer=FluxStorageWriter(url, **server_options(flux_server)))
    target = {"w": torch.zeros(300, 257), "b": torch.zeros(12_345, dtype=torch.uint8),
              "h": torch.zeros(77, dtype=torch.bfloat16), "meta": {"step": 0, "tags": ["", ""]}}
    reader = FluxStorageReader(url, chunk_size=8 * 1024 + 3, window=64 * 1024, concurrency=4,
                               **server_options(flux_server))
    dcp.load(target, storage_reader=reader)
    for k in ("w", "b", "h"):
        assert torch.equal(target[k], state[k]), k
    assert target["meta"] == {"step": 12, "tags": ["a", "b"]}


def test_overwrite_during_load_fails_instead_of_mixing(flux_server, bucket):
    url = f"flux://{bucket}/changing"
    dcp.save({"w": torch.zeros(1000)}, storage_writer=FluxStorageWriter(url, **server_options(flux_server)))
    # A load that has read .metadata (the steps dcp.load runs), then another job saves there.
    reader = FluxStorageReader(url, **server_options(flux_server))
    metadata = reader.read_metadata()
    reader.set_up_storage_reader(metadata, True)
    target = {"w": torch.full((1000,), -1.0)}
    planner = DefaultLoadPlanner()
    planner.set_up_planner(target, metadata, True)
    plan = reader.prepare_local_plan(planner.create_local_plan())
    dcp.save({"w": torch.ones(1000)}, storage_writer=FluxStorageWriter(url, **server_options(flux_server)))
    with pytest.raises(CheckpointChangedError, match="changed while loading"):
        reader.read_data(plan, planner).wait()
    assert torch.equal(target["w"], torch.full((1000,), -1.0))  # nothing from the new save leaked in
    # A fresh load sees the new checkpoint whole.
    dcp.load(target, storage_reader=FluxStorageReader(url, **server_options(flux_server)))
    assert torch.equal(target["w"], torch.ones(1000))


@pytest.mark.slow
def test_two_ranks_save_then_load_into_two_and_into_one(flux_server, bucket):
    url = f"flux://{bucket}/sharded"
    run_ranks("save_load", url, flux_server.url)  # the ranks also load it back, resharded, and check
    names = flux_server.list_names(bucket, "sharded/")
    assert {"sharded/__0_0.distcp", "sharded/__1_0.distcp", "sharded/.metadata"} <= set(names)

    full = expected()
    one = {"model": {"w": torch.zeros_like(full["model"]["w"]), "b": torch.zeros_like(full["model"]["b"])}, "step": 0}
    reader = FluxStorageReader(url, **server_options(flux_server))
    dcp.load(one, storage_reader=reader)
    assert torch.equal(one["model"]["w"], full["model"]["w"])
    assert torch.equal(one["model"]["b"], full["model"]["b"])
    assert one["step"] == 12
    # Each saved 1 MiB half of "w" lands in its rows of the one target straight from the bytes.
    assert reader.stats["copied_direct"] == 2


def test_large_items_are_copied_straight_into_their_targets(flux_server, bucket):
    """Big tensor items skip torch.load's temporary tensor; what cannot be copied as bytes (another
    dtype, a non-contiguous target, a small item) is loaded as torch does. Every value is exact."""
    url = f"flux://{bucket}/ckpt/direct"
    g = torch.Generator().manual_seed(3)
    state = {
        "f32": torch.randn(1000, 700, generator=g),                                  # 2.8 MB
        "bf16": torch.randn(3, 400_000, generator=g).to(torch.bfloat16),             # 2.4 MB
        "i64": torch.randint(-2**40, 2**40, (300_001,), generator=g),                # 2.4 MB, odd length
        "to_f64": torch.randn(512, 1024, generator=g),                               # 2 MiB, loaded as float64
        "transposed": torch.randn(1024, 768, generator=g),                           # 3 MiB, into a .t() view
        "small": torch.arange(100, dtype=torch.int16),
    }
    dcp.save(state, storage_writer=FluxStorageWriter(url, **server_options(flux_server)))
    backing = torch.zeros(768, 1024)
    target = {
        "f32": torch.empty(1000, 700), "bf16": torch.empty(3, 400_000, dtype=torch.bfloat16),
        "i64": torch.empty(300_001, dtype=torch.int64), "to_f64": torch.zeros(512, 1024, dtype=torch.float64),
        "transposed": backing.t(), "small": torch.zeros(100, dtype=torch.int16),
    }
    # Odd-sized chunks and small windows: the copied bytes come from many received chunks.
    reader = FluxStorageReader(url, chunk_size=64 * 1024 + 3, window=4 * 2**20, **server_options(flux_server))
    dcp.load(target, storage_reader=reader)
    for k in ("f32", "bf16", "i64", "small"):
        assert torch.equal(target[k], state[k]), k
    assert torch.equal(target["to_f64"], state["to_f64"].double())
    assert torch.equal(backing.t(), state["transposed"])
    assert reader.stats == {"copied_direct": 3, "deserialized": 3}


@pytest.mark.slow
def test_save_killed_midway_leaves_no_metadata(flux_server, bucket):
    url = f"flux://{bucket}/killed"
    # A complete earlier save at the same URL: the new save must retire its .metadata first.
    dcp.save({"old": torch.ones(4)}, storage_writer=FluxStorageWriter(url, **server_options(flux_server)))
    assert "killed/.metadata" in flux_server.list_names(bucket, "killed/")

    # 500 ms before every answer: 12 x 4 MB of 5 MiB parts, 8 in flight, need several seconds.
    flux_server.configure(latency_ms=500)
    proc = subprocess.Popen(
        [sys.executable, str(WORKER), "big", url, flux_server.url],
        env=worker_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 60
        while not flux_server.multipart_uploads(bucket):
            assert proc.poll() is None, f"save ended before it could be killed: {proc.stdout.read()[-2000:]}"
            assert time.monotonic() < deadline, "the save never started uploading"
            time.sleep(0.05)
        # An upload is open and its parts are in flight: kill the saver now, as a preemption would.
        assert proc.poll() is None, "save finished before it could be killed; make it bigger"
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    flux_server.configure(latency_ms=0)

    names = flux_server.list_names(bucket, "killed/")
    assert "killed/.metadata" not in names
    assert not any(n.endswith(".tmp") for n in names)
    reader = FluxStorageReader(url, **server_options(flux_server))
    with pytest.raises(IncompleteCheckpointError, match=f"no complete checkpoint at {url}") as info:
        reader.read_metadata()
    assert isinstance(info.value, FileNotFoundError)
    # dcp.load wraps storage errors in its CheckpointException; ours is its message.
    with pytest.raises(CheckpointException, match=f"no complete checkpoint at {url}"):
        dcp.load({"t0": torch.zeros(1_000_000)}, storage_reader=reader)


def test_async_save_with_gloo_group(flux_server, bucket, monkeypatch):
    if dist.is_initialized():
        pytest.skip("a process group is already initialized in this process")
    monkeypatch.setenv("GLOO_SOCKET_IFNAME", "lo")  # loopback only
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{free_port()}", rank=0, world_size=1)
    try:
        url = f"flux://{bucket}/async"
        model = torch.nn.Linear(64, 32)
        saved = {k: v.clone() for k, v in model.state_dict().items()}
        future = dcp.async_save({"model": model.state_dict()},
                                storage_writer=FluxStorageWriter(url, **server_options(flux_server)))
        with torch.no_grad():
            model.weight.zero_()  # training goes on; the staged copy is what gets saved
        future.result(timeout=120)
        target = {"model": {k: torch.empty_like(v) for k, v in saved.items()}}
        dcp.load(target, storage_reader=FluxStorageReader(url, **server_options(flux_server)))
        for k in saved:
            assert torch.equal(target["model"][k], saved[k])
    finally:
        dist.destroy_process_group()

"""Chaos: a server that stops (SIGSTOP), a slow uplink, a DataLoader worker killed mid-epoch.

Whatever happens, the caller gets an error within a bounded time, never a hang; a slow link that keeps
moving completes.
"""
from __future__ import annotations

import multiprocessing
import os
import signal
import threading
import time

import pytest
import torch

from fluxfs import temporaries
from fluxfs.errors import RequestTimeout
from fluxfs.gcs import bridge
from fluxfs.server import run
from tests.badinput.test_stalls import within
from tests.conftest import make_fs, new_bucket_name

from .conftest import assert_clean

MiB = 2**20
QUICK = {"max_attempts": 2, "initial": 0.01, "maximum": 0.02}


@pytest.fixture
def stoppable_server():
    """A server in a subprocess, so it can be stopped with SIGSTOP (and always continued afterwards)."""
    with run(in_process=False) as srv:
        try:
            yield srv
        finally:
            os.kill(srv.process.pid, signal.SIGCONT)


@pytest.mark.slow
def test_server_stopped_mid_part_fails_the_write_within_a_bound(stoppable_server):
    srv = stoppable_server
    bucket = new_bucket_name()
    srv.create_bucket(bucket)
    fs = make_fs(srv, read_timeout=1, retry=QUICK, part_size=64 * MiB)
    fs.pipe_file(f"{bucket}/old", b"x" * 1000)
    data = os.urandom(64 * MiB + 1)
    srv.configure(bandwidth_mbps=20)  # the 64 MiB part takes ~3 s: long enough to stop the server mid-part

    def write():
        with fs.open(f"{bucket}/big", "wb") as f:
            f.write(data)

    box: dict = {}
    writer = threading.Thread(target=lambda: box.update(within(60, write)), daemon=True)
    writer.start()
    deadline = time.monotonic() + 20
    while not srv.multipart_uploads(bucket) and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.5)
    os.kill(srv.process.pid, signal.SIGSTOP)  # as `kill -STOP`, or a VM paused
    writer.join(70)
    err = box.get("error")
    assert isinstance(err, RequestTimeout), box
    assert str(err).startswith(f"{bucket}/big") and "timed out" in str(err)
    assert box["elapsed"] < 30  # ~1 s per attempt; the abort also meets the stopped server

    # And a read from the stopped server.
    box = within(60, lambda: fs.cat_file(f"{bucket}/old"))
    assert isinstance(box.get("error"), RequestTimeout), box
    assert "no answer from the server within 1 s" in str(box["error"])
    assert box["elapsed"] < 10

    os.kill(srv.process.pid, signal.SIGCONT)
    srv.configure(bandwidth_mbps=0)
    # The abort could not reach a stopped server: what it left (and what the server makes of requests
    # still queued in its sockets when it resumes) is what `fluxfs cleanup` removes.
    for _ in range(40):
        bridge.run(fs, lambda: temporaries.abort_incomplete_uploads(fs, bucket))
        time.sleep(0.1)
        if not srv.multipart_uploads(bucket):
            break
    assert srv.list_names(bucket) == ["old"]
    assert_clean(srv, bucket)


def test_checkpoint_over_a_slow_uplink_completes(flux_server, bucket, storage_options):
    from fluxfs.pipes import FluxCheckpoint

    # 2 MB/s per stream: each 5 MiB part takes 2.6 s, far longer than read_timeout, yet always moving.
    ckpt = FluxCheckpoint(**{**storage_options, "read_timeout": 1}, part_size=5 * MiB, write_concurrency=2)
    state = {"w": torch.randn(3 * MiB // 4)}  # 12 MiB of float32
    flux_server.configure(bandwidth_mbps=2)
    ckpt.save(state, f"flux://{bucket}/slow.pt")
    flux_server.configure(bandwidth_mbps=0)
    assert torch.equal(ckpt.load(f"flux://{bucket}/slow.pt")["w"], state["w"])
    assert_clean(flux_server, bucket)


def test_killed_dataloader_worker_is_an_error_not_a_hang(flux_server, bucket, storage_options):
    from torch.utils.data import DataLoader

    from fluxfs.pipes import FluxIterableDataset

    flux_server.generate(bucket, 2000, size=1000, prefix="k/")
    ds = FluxIterableDataset.from_prefix(f"flux://{bucket}/k/", storage_options=storage_options, read_batch=16)
    loader = DataLoader(ds, batch_size=8, num_workers=2, collate_fn=list)

    def epoch():
        seen = 0
        for batch in loader:
            seen += len(batch)
            if seen == 8:  # the workers are up and reading: kill one as the OOM killer would
                victim = multiprocessing.active_children()[0]
                os.kill(victim.pid, signal.SIGKILL)
                time.sleep(0.2)
        return seen

    def hung(signum, frame):
        raise AssertionError("the epoch hung after its worker was killed")

    # In the main thread, as a training loop runs: there torch's SIGCHLD handler sees the dead worker.
    previous = signal.signal(signal.SIGALRM, hung)
    signal.alarm(60)
    start = time.monotonic()
    try:
        with pytest.raises(RuntimeError) as info:
            epoch()
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    assert "DataLoader worker" in str(info.value) and "killed by signal: Killed" in str(info.value)
    assert time.monotonic() - start < 30

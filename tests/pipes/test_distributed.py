"""Sharding over real torch.distributed ranks, and StatefulDataLoader resume in a fresh process.

Both run children (``tests/pipes/_child.py``) that exercise the spawn and forkserver start methods.
"""
from __future__ import annotations

import json
import socket
import subprocess
import sys
from collections import Counter
from pathlib import Path

import torch
from torchdata.stateful_dataloader import StatefulDataLoader

from . import _child
from .conftest import N_DATA

ROOT = Path(__file__).resolve().parents[2]


def run_child(*args: str) -> None:
    proc = subprocess.run([sys.executable, "-m", "tests.pipes._child", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=240)
    assert proc.returncode == 0, f"child {args[0]} failed:\n{proc.stderr[-4000:]}"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_two_ranks_two_workers_share_disjoint_and_complete(flux_server, data_bucket, tmp_path):
    url = f"flux://{data_bucket}/data/"
    run_child("ddp", str(tmp_path), url, flux_server.url, str(free_port()))
    shares = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    for share in shares:
        assert share["bad"] == []
        assert abs(len(share["keys"]) - N_DATA // 2) <= 2  # each rank gets half (up to rounding per worker)
    assert not set(shares[0]["keys"]) & set(shares[1]["keys"])
    assert Counter(shares[0]["keys"] + shares[1]["keys"]) == Counter(f"data/{i:08d}" for i in range(N_DATA))


def test_stateful_dataloader_resumes_mid_epoch_in_a_fresh_process(flux_server, data_bucket, tmp_path):
    url = f"flux://{data_bucket}/data/"
    uninterrupted = _child.drain(StatefulDataLoader(_child.make_dataset(url, flux_server.url),
                                                    batch_size=_child.BATCH, num_workers=2))["keys"]
    assert len(uninterrupted) == N_DATA

    loader = StatefulDataLoader(_child.make_dataset(url, flux_server.url), batch_size=_child.BATCH, num_workers=2)
    batches = iter(loader)
    first = _child.drain(next(batches) for _ in range(7))
    torch.save(loader.state_dict(), tmp_path / "state.pt")
    del batches

    run_child("resume", str(tmp_path / "state.pt"), str(tmp_path / "rest.json"), url, flux_server.url)
    rest = json.loads((tmp_path / "rest.json").read_text())
    assert first["bad"] == rest["bad"] == []
    assert len(first["keys"]) == 7 * _child.BATCH
    # Nothing repeated, nothing skipped, and even the order is that of one uninterrupted epoch.
    assert first["keys"] + rest["keys"] == uninterrupted

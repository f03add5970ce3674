"""FluxShardDataset over real torch.distributed ranks (gloo), and StatefulDataLoader resume with workers."""
from __future__ import annotations

import json
import subprocess
import sys
import warnings
from pathlib import Path

from torchdata.stateful_dataloader import StatefulDataLoader

from fluxfs.pipes.shards import FluxShardDataset, MissingIndexWarning
from tests.pipes.test_distributed import free_port

from .conftest import all_sample_keys

ROOT = Path(__file__).resolve().parents[2]


def run_child(mode: str, out_dir, url: str, endpoint: str) -> None:
    proc = subprocess.run([sys.executable, "-m", "tests.shards._child", mode, str(out_dir), url, endpoint,
                           str(free_port())], cwd=ROOT, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-4000:]


def test_two_gloo_ranks_read_equal_shares_covering_every_sample(flux_server, shard_bucket, tmp_path):
    """21 samples over 2 ranks x 2 workers: 6 per reader (3 repeated), every sample read."""
    url = f"flux://{shard_bucket}/ds/"
    run_child("ddp", tmp_path, url, flux_server.url)
    shares = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    assert shares[0]["bad"] == shares[1]["bad"] == []
    assert len(shares[0]["keys"]) == len(shares[1]["keys"]) == 12
    assert set(shares[0]["keys"] + shares[1]["keys"]) == set(all_sample_keys())


def test_stateful_dataloader_with_workers_resumes_exactly(flux_server, shard_bucket):
    def make():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", MissingIndexWarning)
            return FluxShardDataset.from_prefix(f"flux://{shard_bucket}/ds/", shuffle=True, seed=2, shuffle_buffer=3,
                                                storage_options={"endpoint_url": flux_server.url, "token": "anon"})

    def keys(batches):
        return [k for batch in batches for k in batch["__key__"]]

    full = keys(StatefulDataLoader(make(), batch_size=2, num_workers=2))
    assert sorted(full) == sorted(all_sample_keys())
    for stop in (1, 4, 7):
        loader = StatefulDataLoader(make(), batch_size=2, num_workers=2)
        it = iter(loader)
        head = keys(next(it) for _ in range(stop))
        state = loader.state_dict()
        del it
        again = StatefulDataLoader(make(), batch_size=2, num_workers=2)
        again.load_state_dict(state)
        assert head + keys(again) == full, f"resumed after {stop} batches"


def test_states_gathered_from_two_gloo_ranks_resume_on_three_ranks_of_one_worker(flux_server, shard_bucket, tmp_path):
    """2 ranks x 2 workers stop mid-epoch and all_gather their loader states; 3 ranks x 1 worker read the rest."""
    import torch
    from torch.utils.data import DataLoader

    from fluxfs.pipes import reader_states

    from ._child import make_dataset

    url = f"flux://{shard_bucket}/ds/"
    run_child("stop", tmp_path, url, flux_server.url)
    saved = torch.load(tmp_path / "states.pt", weights_only=False)
    head = [k for s in saved for k in s["keys"]]
    assert len(head) > 2 * 3  # 3 batches of up to 2 per rank: mid-epoch (a worker's last batch may be short)
    gathered = {"readers": reader_states(*(s["loader"] for s in saved))}
    rest = []
    for rank in range(3):
        ds = make_dataset(url, flux_server.url, rank=rank, world_size=3)
        ds.load_state_dict(gathered)
        rest.append([s["__key__"] for s in DataLoader(ds, batch_size=None, num_workers=1)])
    assert len({len(r) for r in rest}) == 1  # what was left, shared equally (padded)
    assert set(head) | {k for r in rest for k in r} == set(all_sample_keys())

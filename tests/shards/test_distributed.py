"""FluxShardDataset over real torch.distributed ranks (gloo), and StatefulDataLoader resume with workers."""
from __future__ import annotations

import json
import subprocess
import sys
import warnings
from collections import Counter
from pathlib import Path

from torchdata.stateful_dataloader import StatefulDataLoader

from fluxfs.pipes.shards import FluxShardDataset, MissingIndexWarning
from tests.pipes.test_distributed import free_port

from .conftest import all_sample_keys

ROOT = Path(__file__).resolve().parents[2]


def test_two_gloo_ranks_read_disjoint_complete_shares(flux_server, shard_bucket, tmp_path):
    url = f"flux://{shard_bucket}/ds/"
    proc = subprocess.run([sys.executable, "-m", "tests.shards._child", "ddp", str(tmp_path), url, flux_server.url,
                           str(free_port())], cwd=ROOT, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-4000:]
    shares = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    assert shares[0]["bad"] == shares[1]["bad"] == []
    assert shares[0]["keys"] and shares[1]["keys"]
    assert not set(shares[0]["keys"]) & set(shares[1]["keys"])
    assert Counter(shares[0]["keys"] + shares[1]["keys"]) == Counter(all_sample_keys())


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

"""torch.save / torch.load of state dicts through fsspec.open("flux://..."), and bounded memory."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import fsspec
import pytest

torch = pytest.importorskip("torch")

from .util import MiB, PART_SIZES  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


def state_dict() -> dict:
    gen = torch.Generator().manual_seed(1)
    sd = {f"layers.{i}.bias": torch.randn(64, generator=gen) for i in range(300)}  # many small
    sd.update({f"embed.{i}": torch.randn(1024, 768, generator=gen) for i in range(3)})  # a few of 3 MiB
    sd["step"] = torch.tensor(1234)
    sd["half"] = torch.randn(333, 77, generator=gen).half()
    return sd


@pytest.mark.parametrize("multipart", ["xml", "compose"])
def test_torch_save_load_round_trip(flux_server, bucket, multipart):
    opts = dict(endpoint_url=flux_server.url, token="anon", multipart=multipart,
                part_size=PART_SIZES[multipart] if multipart == "xml" else MiB)
    url = f"flux://{bucket}/ckpt/model.pt"
    sd = state_dict()
    with fsspec.open(url, "wb", **opts) as f:
        torch.save(sd, f)
    with fsspec.open(url, "rb", **opts) as f:
        loaded = torch.load(f, weights_only=True)
    assert loaded.keys() == sd.keys()
    for k, v in sd.items():
        assert loaded[k].dtype == v.dtype and torch.equal(loaded[k], v), k
    assert flux_server.multipart_uploads(bucket) == []


def test_torch_save_failure_leaves_no_checkpoint(flux_server, bucket):
    opts = dict(endpoint_url=flux_server.url, token="anon", multipart="compose", part_size=MiB)

    class Unpicklable:
        def __reduce__(self):
            raise TypeError("cannot pickle this")

    sd = state_dict()
    sd["zz_bad"] = Unpicklable()
    with pytest.raises(TypeError, match="cannot pickle"):
        with fsspec.open(f"flux://{bucket}/model.pt", "wb", **opts) as f:
            torch.save(sd, f)
    fs = fsspec.filesystem("flux", **opts)
    assert not fs.exists(f"{bucket}/model.pt")
    assert flux_server.list_names(bucket, "_fluxfs-tmp/") == []


@pytest.mark.slow
def test_saving_memory_is_bounded(flux_server, bucket):
    """A 64 MiB state dict saves holding about concurrency x part size, not the whole file."""
    part, conc = 5 * MiB, 2
    out = subprocess.run(
        [sys.executable, "-m", "tests.writes.rss_proc", flux_server.url, bucket, "xml", str(part), str(conc),
         "16", "4"],
        cwd=ROOT, capture_output=True, text=True, timeout=240, env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert out.returncode == 0, out.stderr[-2000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["state_bytes"] >= 64 * MiB
    # The budget: extra RSS while saving <= 4 x part size x concurrency (40 MiB here).
    assert result["extra_rss"] <= 4 * part * conc, result
    fs = fsspec.filesystem("flux", endpoint_url=flux_server.url, token="anon", skip_instance_cache=True)
    assert fs.info(f"{bucket}/ckpt.pt")["size"] > 64 * MiB

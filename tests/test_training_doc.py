"""docs/training.md's DDP scripts run as written, under torchrun with 2 gloo ranks, against the embedded server.

The setup lines, then each Python block saved under the name the doc gives it and launched with the doc's
torchrun lines: every rank finishes every epoch with the same number of steps.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

from tests._doc_blocks import block_after
from tests.conftest import make_fs, new_bucket_name

DOC = Path(__file__).resolve().parent.parent / "docs" / "training.md"


def test_the_ddp_scripts_of_docs_training_run_on_two_ranks_with_equal_steps(flux_server, tmp_path):
    """The setup lines; then each script as its 2 ranks, launched as the doc's torchrun lines would (torchrun sets
    RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and MASTER_PORT; its own start-up, a torch import, is spared)."""
    from tests.pipes.test_distributed import free_port

    bucket = new_bucket_name()
    setup = block_after(DOC, "<!-- training-setup", "sh").replace("http://127.0.0.1:9023", flux_server.url)
    launch = block_after(DOC, "<!-- training-launch", "sh").splitlines()
    scripts = {"train_shards.py": "<!-- training-shards", "train_objects.py": "<!-- training-objects"}
    assert launch == [f"torchrun --standalone --nproc-per-node 2 {name}" for name in scripts]
    for name, marker in scripts.items():
        (tmp_path / name).write_text(block_after(DOC, marker, "python").replace("my-bucket", bucket), encoding="utf-8")
    env = dict(os.environ, NO_GCE_CHECK="true", OMP_NUM_THREADS="1",
               PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    env.pop("STORAGE_EMULATOR_HOST", None)
    r = subprocess.run(["bash", "-euc", setup.replace("my-bucket", bucket) + "env"], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr[-4000:]
    env.update(line.split("=", 1) for line in r.stdout.splitlines()  # what the setup exported
               if line.startswith(("STORAGE_EMULATOR_HOST=", "FSSPEC_FLUX_TOKEN=")))
    fs = make_fs(flux_server)  # the shards of uneven sizes the doc says were packed
    heads = [json.loads(fs.cat(p).split(b"\n", 1)[0]) for p in sorted(fs.glob(f"{bucket}/train/*.tar.idx"))]
    assert [h["samples"] for h in heads] == [60, 60, 60, 20]
    out = ""
    for name in scripts:
        port = str(free_port())
        ranks = [subprocess.Popen([sys.executable, name], cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  text=True, env=dict(env, RANK=str(r), LOCAL_RANK=str(r), WORLD_SIZE="2",
                                                      MASTER_ADDR="127.0.0.1", MASTER_PORT=port))
                 for r in range(2)]
        for p in ranks:
            stdout, stderr = p.communicate(timeout=300)
            assert p.returncode == 0, f"{name}: {stdout}{stderr[-4000:]}"
            out += stdout
    lines = re.findall(r"^rank (\d) of 2, epoch (\d): (\d+) steps, loss [\d.]+$", out, re.M)
    # Both scripts, 2 ranks, 3 epochs: 100 samples per rank in batches of 32 (2 workers x 2 for the shards).
    assert sorted(lines) == sorted([(str(rank), str(epoch), "4") for rank in (0, 1) for epoch in (0, 1, 2)] * 2), out

"""`make demo` (`fluxfs demo`) runs end to end in a reduced size and every check it makes passes."""
from __future__ import annotations

import subprocess
import sys

DEMO = """
import faulthandler, sys
faulthandler.dump_traceback_later(float(sys.argv[1]), exit=True)  # a hang shows where it hangs
from fluxfs.cli import main
sys.exit(main(["demo", "--small", "--objects", "1000", "--checkpoint-mb", "8", "--gcsfs-samples", "100"]))
"""


def test_demo_runs_in_reduced_size():
    budget = 240
    r = subprocess.run([sys.executable, "-c", DEMO, str(budget - 20)], capture_output=True, text=True,
                       timeout=budget)
    assert r.returncode == 0, r.stdout + r.stderr[-4000:]
    out = r.stdout
    for stage in ("write 1,000 images", "list 1,000 objects", "train 1 epoch", "save checkpoint",
                  "load checkpoint"):
        assert stage in out, out
    for check in ("fluxfs listing complete", "every image trained on once", "checkpoint tensors equal",
                  "gcsfs checkpoint tensors equal"):
        assert f"[ok] {check}" in out, out
    assert "FAILED" not in out


def test_demo_against_an_existing_server_cleans_up(flux_server):
    """`fluxfs --endpoint URL demo` uses that server and removes its bucket afterwards."""
    from tests.conftest import make_fs

    fs = make_fs(flux_server)
    before = set(fs.ls("", detail=False))
    r = subprocess.run([sys.executable, "-m", "fluxfs.cli", "--endpoint", flux_server.url, "-q", "demo",
                        "--objects", "300", "--checkpoint-mb", "2", "--no-gcsfs", "--workers", "0"],
                       capture_output=True, text=True, timeout=180)
    assert r.returncode == 0, r.stdout + r.stderr[-4000:]
    assert "[ok] checkpoint tensors equal" in r.stdout and "FAILED" not in r.stdout
    fs.invalidate_cache()
    assert set(fs.ls("", detail=False)) == before  # the demo's bucket is gone again

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

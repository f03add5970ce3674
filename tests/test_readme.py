"""The README's quick tour runs as written (so it cannot rot), against the embedded server."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from tests.conftest import make_fs, new_bucket_name

README = Path(__file__).resolve().parent.parent / "README.md"
MARKER = "<!-- quick-tour"


def quick_tour() -> str:
    """The first ```python block after the quick-tour marker."""
    text = README.read_text(encoding="utf-8")
    assert MARKER in text, "README.md lost its quick-tour marker"
    m = re.search(r"```python\n(.*?)```", text[text.index(MARKER):], re.S)
    assert m, "no python block after the quick-tour marker"
    return m.group(1)


def test_readme_opens_with_the_two_commands():
    lines = [ln for ln in README.read_text(encoding="utf-8").splitlines() if ln.strip()]
    assert lines[0].startswith("# ")
    assert lines[1] == "```sh" and lines[2].startswith("make demo") and lines[3].startswith("make test")


def test_quick_tour_runs(flux_server, tmp_path):
    code = quick_tour()
    assert code.count("\n") <= 20, "the quick tour should stay short"
    bucket = new_bucket_name()
    flux_server.create_bucket(bucket)
    flux_server.generate(bucket, 200, (100, 2000), prefix="images/")
    script = tmp_path / "tour.py"
    script.write_text(code.replace("my-bucket", bucket), encoding="utf-8")
    # As the README tells users: the emulator's URL and an anonymous token. NO_GCE_CHECK keeps
    # google-auth from probing a metadata server should anything fall back to the default chain.
    env = dict(os.environ, STORAGE_EMULATOR_HOST=flux_server.url, FSSPEC_FLUX_TOKEN="anon", NO_GCE_CHECK="true")
    r = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True,
                       timeout=180)
    assert r.returncode == 0, r.stdout + r.stderr[-4000:]
    fs = make_fs(flux_server)
    first = fs.cat(f"{bucket}/images/00000000")
    assert r.stdout.splitlines()[0] == f"{len(first)} bytes"
    written = fs.find(bucket)
    assert f"{bucket}/ckpt/model.pt" in written
    assert f"{bucket}/dcp/step-1/.metadata" in written
    assert fs.info(f"{bucket}/ckpt/model.pt")["size"] > 512 * 10 * 4  # the weights went up

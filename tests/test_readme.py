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
SETUP_MARKER = "<!-- quick-tour-setup"


def block_after(marker: str, lang: str) -> str:
    """The first ```lang block after `marker` in the README."""
    text = README.read_text(encoding="utf-8")
    assert marker in text, f"README.md lost its {marker} marker"
    m = re.search(rf"```{lang}\n(.*?)```", text[text.index(marker):], re.S)
    assert m, f"no {lang} block after {marker}"
    return m.group(1)


def quick_tour() -> str:
    return block_after(MARKER + ":", "python")


def test_readme_opens_with_the_two_commands():
    lines = [ln for ln in README.read_text(encoding="utf-8").splitlines() if ln.strip()]
    assert lines[0].startswith("# ")
    assert lines[1] == "```sh" and lines[2].startswith("make demo") and lines[3].startswith("make test")


def test_quick_tour_runs_as_written_from_the_sample_data_step(flux_server, tmp_path):
    """The setup lines (export, sample-images, mb, cp) and the tour, each run literally, in a fresh directory."""
    setup, code = block_after(SETUP_MARKER, "sh"), quick_tour()
    assert code.count("\n") <= 24, "the quick tour should stay short"
    bucket = new_bucket_name()
    # As the README tells users, but with this test's server and a fresh bucket name.
    setup = setup.replace("http://127.0.0.1:9023", flux_server.url).replace("my-bucket", bucket)
    env = dict(os.environ, NO_GCE_CHECK="true",  # google-auth must never probe a metadata server here
               PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    env.pop("STORAGE_EMULATOR_HOST", None)
    (tmp_path / "tour.py").write_text(code.replace("my-bucket", bucket), encoding="utf-8")
    r = subprocess.run(["bash", "-euc", setup + f"\nexec {sys.executable} tour.py"], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr[-4000:]
    fs = make_fs(flux_server)
    images = sorted(fs.find(f"{bucket}/images"))
    assert len(images) == 200 and {n.split("/")[-2] for n in images} == {"circle", "cross", "square", "triangle"}
    assert r.stdout.splitlines()[0] == f"200 objects, {fs.size(images[0])} bytes in {images[0]}"
    assert fs.cat(images[0])[:3] == b"\xff\xd8\xff"  # a JPEG file, as a user's own would be
    written = fs.find(bucket)
    assert f"{bucket}/ckpt/model.pt" in written
    assert f"{bucket}/dcp/step-1/.metadata" in written
    assert fs.info(f"{bucket}/ckpt/model.pt")["size"] > 3 * 32 * 32 * 4 * 4  # the trained weights went up

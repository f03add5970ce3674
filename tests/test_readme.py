"""The README's commands and Python blocks run as written (so they cannot rot), against the embedded server.

Every ```python block runs, in order, in one interpreter (a reader pasting them into one session), after
the quick tour's setup lines (export, sample-images, mb, cp): that setup is the only preparation, and each
block may use what the prose before it says exists (the tour's bucket and images). A block that needs what
this machine lacks (say CUDA) is skipped only if its first line is SKIP_MARKER followed by the reason, and
the test asserts how many are skipped (EXPECTED_SKIPPED), so a block cannot drop out unnoticed.
"""
from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tests._doc_blocks import block_after, fenced_blocks
from tests.conftest import make_fs, new_bucket_name

README = Path(__file__).resolve().parent.parent / "README.md"
MARKER = "<!-- quick-tour"
SETUP_MARKER = "<!-- quick-tour-setup"
SKIP_MARKER = "# readme-test: skip"
EXPECTED_SKIPPED = 0


def runnable_python_blocks() -> list[str]:
    blocks = fenced_blocks(README, "python")
    run = [b for b in blocks if not b.startswith(SKIP_MARKER)]
    assert len(blocks) - len(run) == EXPECTED_SKIPPED, f"{len(blocks) - len(run)} README blocks skipped"
    return run


def quick_tour() -> str:
    return block_after(README, MARKER + ":", "python")


def test_readme_opens_with_the_two_commands():
    lines = [ln for ln in README.read_text(encoding="utf-8").splitlines() if ln.strip()]
    assert lines[0].startswith("# ")
    assert lines[1] == "```sh" and lines[2].startswith("make demo") and lines[3].startswith("make test")


def test_every_python_block_is_run_or_marked_skipped():
    blocks = fenced_blocks(README, "python")
    assert len(blocks) >= 2 and blocks[0] == quick_tour(), "the quick tour is the README's first Python block"
    assert len(runnable_python_blocks()) == len(blocks) - EXPECTED_SKIPPED


@pytest.mark.slow
def test_quick_tour_and_every_python_block_run_as_written_from_the_sample_data_step(flux_server, tmp_path):
    """The setup lines (export, sample-images, mb, cp), then the tour and every other Python block of the
    README in order, each run literally, in a fresh directory."""
    setup, code = block_after(README, SETUP_MARKER, "sh"), quick_tour()
    assert code.count("\n") <= 24, "the quick tour should stay short"
    blocks = runnable_python_blocks()
    code = "".join(f"# --- README.md python block {i + 1} ---\n{b}" for i, b in enumerate(blocks))
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
    # The tar-shard block: every image packed once, with its index beside the shard, and read back.
    shards = [n for n in written if n.startswith(f"{bucket}/train/")]
    assert shards == [f"{bucket}/train/shard-000000.tar", f"{bucket}/train/shard-000000.tar.idx"], shards
    assert "200 samples in 2 objects" in r.stdout.splitlines(), r.stdout
    # The checkpoint block (async saves, then a load) and the other-libraries block (webdataset, gs://, stats).
    assert "resumed at step 3" in r.stdout.splitlines(), r.stdout
    assert all(f"{bucket}/ckpt/step-{n}.pt" in written for n in (1, 2, 3)), written
    assert "[{'a': 1, 'b': 2}]" in r.stdout.splitlines(), r.stdout
    assert "Warning" not in r.stderr, r.stderr[-4000:]  # the tour runs without a warning


def test_install_commands_work_from_the_clone():
    """Every `pip install` and `make` line of the README's shell blocks works where the README says the reader
    stands (the clone's top directory): local paths are projects pip can install, `-c` files exist, make
    targets are the Makefile's. `pip install ./fluxfs` from the clone named the package directory, not a project."""
    root = README.parent
    targets = set(re.findall(r"^([\w-]+):", (root / "Makefile").read_text(encoding="utf-8"), re.M))
    checked = 0
    for block in fenced_blocks(README, "sh"):
        for line in block.splitlines():
            words = shlex.split(line.split("#", 1)[0])
            if words[:1] == ["make"]:
                assert set(w for w in words[1:] if "=" not in w) <= targets, line
                checked += 1
            if words[:2] != ["pip", "install"]:
                continue
            checked += 1
            args = iter(words[2:])
            for arg in args:
                if arg in ("-c", "--constraint"):
                    assert (root / next(args)).is_file(), line
                elif arg in ("--index-url", "-i"):
                    next(args)
                elif arg.startswith((".", "/")):
                    project = root / arg.split("[", 1)[0]
                    assert (project / "pyproject.toml").is_file() or (project / "setup.cfg").is_file(), (
                        f"{line.strip()!r}: {arg} is not a project pip can install from the clone")
    assert checked >= 6, checked


def test_the_opening_says_when_to_choose_fluxfs_over_gcsfs_and_when_not():
    """The README's opening and docs/compat.md's section name the costs and limits a gcsfs user weighs."""
    text = README.read_text(encoding="utf-8")
    opening = text[:text.index("## Install")]
    anchor = "docs/compat.md#when-to-choose-fluxfs-over-gcsfs-and-when-not"
    assert anchor in opening
    compat = (README.parent / "docs" / "compat.md").read_text(encoding="utf-8")
    heading = "## When to choose fluxfs over gcsfs, and when not"
    assert heading in compat
    section = compat[compat.index(heading):].split("\n## ", 1)[0]
    for topic in ("write permission", "read-only service account", "Class A", "Class B", "compose=False",
                  "Versioned buckets", "zonal buckets", "BidiReadObject", "zonal_transport", "soft delete"):
        assert topic.lower() in section.lower(), topic
    for topic in ("write permission", "read-only service account", "Class A", "zonal", "versioned"):
        assert topic.lower() in opening.lower(), topic

"""The plain install (`pip install fluxfs`, no `torch` extra): the filesystem, the server and the CLI work,
and what needs PyTorch says how to install it.

How "without torch" is built, and why it is honest: a real virtualenv (`python -m venv --without-pip`,
the same base interpreter) whose site-packages holds a symlink to every entry of this venv's
site-packages except the files that the torch extra's distributions (torch, torchdata, numpy,
braceexpand) installed, as their own RECORD lists them. Nothing is patched or mocked: `import torch`
fails there because torch is not on disk for that interpreter, exactly as after `pip install fluxfs`.
It takes well under a second (no download, no copy); the filesystem's own tests then run in it.
"""
from __future__ import annotations

import configparser
import os
import subprocess
from pathlib import Path

import pytest

from ._venvs import TORCH_EXTRA, dist_entries, venv_view

ROOT = Path(__file__).resolve().parents[1]
HINT = "fluxfs.pipes needs PyTorch: pip install 'fluxfs[torch]'"

# A representative subset of the filesystem's own tests: the fsspec API, batched reads, the CLI's ls/cp/cat.
FILESYSTEM_TESTS = ["tests/test_filesystem.py", "tests/reads/test_batched.py", "tests/cli/test_cli.py"]
CLI_SELECTION = "not cli or ls or cp or cat or console"


@pytest.fixture(scope="module")
def bare_python(tmp_path_factory) -> Path:
    """The interpreter of a virtualenv holding this venv's packages minus the torch extra (module docstring)."""
    venv = tmp_path_factory.mktemp("no-torch") / "venv"
    left_out = dist_entries(*TORCH_EXTRA)
    assert {"torch", "torchdata", "numpy"} <= left_out, left_out  # the view below really lacks them
    python = venv_view(venv, left_out)
    # The console script pip writes for `fluxfs` (setup.cfg's entry point), pointing at this interpreter.
    script = venv / "bin" / "fluxfs"
    script.write_text(f"#!{python}\nimport sys\nfrom fluxfs.cli import main\nsys.exit(main())\n", encoding="utf-8")
    script.chmod(0o755)
    return python


def run(python: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "STORAGE_EMULATOR_HOST")}
    return subprocess.run([str(python), *args], cwd=ROOT, env={**env, "NO_GCE_CHECK": "true"},
                          capture_output=True, text=True, timeout=timeout)


def test_install_requires_has_no_torch():
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "setup.cfg", encoding="utf-8")
    required = [line.split(">")[0].split("=")[0].strip() for line in cfg["options"]["install_requires"].split("\n")
                if line.strip()]
    assert not set(required) & set(TORCH_EXTRA), required
    extra = [line.split(">")[0].strip() for line in cfg["options.extras_require"]["torch"].split("\n") if line.strip()]
    assert extra == list(TORCH_EXTRA), extra
    assert "torch" in Makefile_extras(), "make test must install the torch extra"


def Makefile_extras() -> list[str]:  # named after the file it reads
    for line in (ROOT / "Makefile").read_text(encoding="utf-8").splitlines():
        if line.startswith("EXTRAS ?="):
            return line.split("=", 1)[1].strip().split(",")
    raise AssertionError("Makefile has no EXTRAS line")


def test_the_bare_venv_has_fluxfs_but_no_torch(bare_python):
    r = run(bare_python, "-c", "import fluxfs, fsspec, gcsfs; print(fluxfs.__file__); import torch")
    assert r.returncode == 1 and "ModuleNotFoundError: No module named 'torch'" in r.stderr, r.stderr[-2000:]
    assert Path(r.stdout.strip()).resolve() == (ROOT / "fluxfs" / "__init__.py").resolve()


@pytest.mark.parametrize("module", ["fluxfs.pipes", "fluxfs.pipes.shards", "fluxfs.pipes.checkpoint",
                                    "fluxfs.pipes.weights", "fluxfs.pipes.safetensors"])
def test_importing_pipes_without_torch_says_how_to_install_it(bare_python, module):
    r = run(bare_python, "-c", f"import {module}")
    assert r.returncode == 1, r.stderr[-2000:]
    assert r.stderr.strip().splitlines()[-1] == f"ModuleNotFoundError: {HINT}", r.stderr[-2000:]


@pytest.mark.parametrize("argv", [["shard", "flux://b/in/", "flux://b/out/shard-{:06d}.tar"],
                                  ["shard", "index", "flux://b/out/"], ["demo", "--small"]])
def test_cli_commands_that_need_torch_say_how_to_install_it(bare_python, argv):
    r = run(bare_python, "-m", "fluxfs.cli", "--endpoint", "127.0.0.1:9", *argv)
    assert r.returncode == 1, r.stdout + r.stderr
    want = f"fluxfs {argv[0]}: needs PyTorch: pip install 'fluxfs[torch]'"
    assert r.stderr.strip().splitlines()[-1] == want, r.stderr[-2000:]


def test_filesystem_tests_pass_without_torch(bare_python):
    """The filesystem's own tests (fsspec API, batched reads, the CLI's ls/cp/cat) in the venv without torch."""
    r = run(bare_python, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", "-k", CLI_SELECTION,
            *FILESYSTEM_TESTS, timeout=600)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
    summary = r.stdout.strip().splitlines()[-1]
    assert " passed" in summary and "failed" not in summary and "error" not in summary, summary
    assert int(summary.split(" passed")[0].split()[-1]) >= 30, summary

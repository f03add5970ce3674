"""Packaging: fluxfs never imports torch, `flux` is registered by entry point, and `fluxfs.pipes`
imports both from the editable install and from a built wheel. Each check runs in a fresh
interpreter so nothing imported by the test session leaks into it."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from ._venvs import TORCH_EXTRA, dist_entries, editable_fluxfs_entries, ours, venv_view

ROOT = Path(__file__).resolve().parents[1]


def run_py(code: str, env: dict | None = None, cwd: str | None = None) -> str:
    """Run `code` in a fresh interpreter of this venv; return stdout, failing the test with stderr."""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env=env, cwd=cwd)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout.strip()


def test_import_fluxfs_does_not_import_torch():
    # Every module of fluxfs outside fluxfs.pipes (never __main__, which would start the server).
    out = run_py(
        "import importlib, pkgutil, sys, fluxfs\n"
        "mods = [m.name for m in pkgutil.walk_packages(fluxfs.__path__, 'fluxfs.')\n"
        "        if not m.name.startswith('fluxfs.pipes') and not m.name.endswith('__main__')]\n"
        "for m in mods: importlib.import_module(m)\n"
        "print(len(mods), sorted(m for m in sys.modules if m == 'torch' or m.startswith('torch.')))"
    )
    count, torch_modules = out.split(" ", 1)
    assert int(count) >= 10 and torch_modules == "[]", out


def test_entry_point_registers_flux_without_importing_fluxfs():
    out = run_py(
        "import sys, fsspec\n"
        "assert 'fluxfs' not in sys.modules\n"
        "cls = fsspec.get_filesystem_class('flux')\n"
        "import fluxfs\n"
        "print(cls is fluxfs.FluxFileSystem, cls.__module__, cls.__name__)"
    )
    assert out == "True fluxfs.core FluxFileSystem"


def test_pipes_imports_from_editable_install(tmp_path):
    # Run from an unrelated directory so the repository root is not on sys.path.
    out = run_py("import fluxfs.pipes; print(fluxfs.pipes.__file__)", cwd=str(tmp_path))
    assert Path(out).resolve() == (ROOT / "pipes" / "__init__.py").resolve()


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """The wheel a user installs: built with no dependencies and no isolation (nothing is downloaded)."""
    tmp = tmp_path_factory.mktemp("wheel")
    # Build from a copy so setuptools' build/ and egg-info never land in the shared tree.
    src = tmp / "src"
    shutil.copytree(ROOT, src, ignore=shutil.ignore_patterns(
        ".git", ".venv", "build", "dist", "*.egg-info", "__pycache__", "bench", "notebooks", "tests"))
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(tmp / "dist"),
         str(src)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (built,) = (tmp / "dist").glob("fluxfs-*.whl")
    return built


def source_modules() -> list[str]:
    """Every module of the source tree under its installed name (pipes/ is fluxfs.pipes), no __main__."""
    names = []
    for top, prefix in (("fluxfs", "fluxfs"), ("pipes", "fluxfs.pipes")):
        for path in sorted((ROOT / top).rglob("*.py")):
            parts = list(path.relative_to(ROOT / top).with_suffix("").parts)
            if parts[-1] == "__main__":
                continue
            if parts[-1] == "__init__":
                parts.pop()
            names.append(".".join([prefix, *parts]))
    return names


def test_wheel_holds_every_package_and_no_top_level_pipes(wheel):
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        (metadata,) = [n for n in names if n.endswith(".dist-info/METADATA")]
        requires = [ln.split(":", 1)[1].strip() for ln in zf.read(metadata).decode().splitlines()
                    if ln.startswith("Requires-Dist:")]
    packages = {p.relative_to(ROOT).parent for p in ROOT.glob("fluxfs/**/__init__.py")}
    packages |= {Path("fluxfs") / p.relative_to(ROOT).parent for p in ROOT.glob("pipes/**/__init__.py")}
    missing = sorted(str(p) for p in packages if f"{p.as_posix()}/__init__.py" not in names)
    assert not missing, f"packages missing from the wheel: {missing}"
    assert not any(n.startswith("pipes/") for n in names)  # never a top-level `pipes` (stdlib clash)
    # `pip install fluxfs` brings no torch; `pip install 'fluxfs[torch]'` does.
    torch_reqs = [r for r in requires if r.startswith(("torch", "numpy"))]
    assert torch_reqs and all('extra == "torch"' in r for r in torch_reqs), requires


@pytest.mark.parametrize("extra", ["torch", "plain"])
def test_every_module_imports_from_the_installed_wheel(wheel, tmp_path, extra):
    """`pip install fluxfs-*.whl` into a fresh virtualenv (with and without the torch extra's packages, and
    without the editable install) and import every module from there."""
    left_out = editable_fluxfs_entries(ours()) | (dist_entries(*TORCH_EXTRA) if extra == "plain" else set())
    python = venv_view(tmp_path / "venv", left_out)
    proc = subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps",
                           "--no-index", str(wheel)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    modules = [m for m in source_modules() if extra == "torch" or not m.startswith("fluxfs.pipes")]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run(
        [str(python), "-c",
         "import importlib, sys\n"
         "bad = []\n"
         "for m in sys.argv[1:]:\n"
         "    mod = importlib.import_module(m)\n"
         "    if '/site-packages/fluxfs/' not in mod.__file__ or not mod.__file__.startswith(sys.prefix):\n"
         "        bad.append(mod.__file__)\n"
         "print(len(sys.argv) - 1, bad, 'torch' in sys.modules)\n"
         "import fluxfs.pipes\n", *modules],
        capture_output=True, text=True, timeout=300, env=env, cwd=str(tmp_path))
    if extra == "torch":
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert proc.stdout.split() == [str(len(modules)), "[]", "True"], proc.stdout
    else:
        # The plain install: every module of the filesystem imports, torch stays out, pipes says what to install.
        assert proc.stdout.split() == [str(len(modules)), "[]", "False"], proc.stdout + proc.stderr[-3000:]
        assert proc.stderr.strip().splitlines()[-1] == (
            "ModuleNotFoundError: fluxfs.pipes needs PyTorch: pip install 'fluxfs[torch]'"), proc.stderr[-3000:]

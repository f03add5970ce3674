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


def test_pipes_imports_from_built_wheel(tmp_path):
    """Build a wheel (no dependencies, no isolation: nothing is downloaded), unpack it, import from there."""
    # Build from a copy so setuptools' build/ and egg-info never land in the shared tree.
    src = tmp_path / "src"
    shutil.copytree(ROOT, src, ignore=shutil.ignore_patterns(
        ".git", ".venv", "build", "dist", "*.egg-info", "__pycache__", "bench", "notebooks", "tests"))
    dist = tmp_path / "dist"
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(dist), str(src)],
        capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (wheel,) = dist.glob("fluxfs-*.whl")
    site = tmp_path / "site"
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        assert "fluxfs/pipes/__init__.py" in names and "fluxfs/server/__init__.py" in names
        assert "fluxfs/server/grpc/services.py" in names  # every subpackage listed in setup.cfg
        assert not any(n.startswith("pipes/") for n in names)  # never a top-level `pipes` (stdlib clash)
        zf.extractall(site)
        (metadata,) = [n for n in names if n.endswith(".dist-info/METADATA")]
        requires = [ln.split(":", 1)[1].strip() for ln in zf.read(metadata).decode().splitlines()
                    if ln.startswith("Requires-Dist:")]
    # `pip install fluxfs` brings no torch; `pip install 'fluxfs[torch]'` does.
    torch_reqs = [r for r in requires if r.startswith(("torch", "numpy"))]
    assert torch_reqs and all('extra == "torch"' in r for r in torch_reqs), requires
    # PYTHONPATH entries come before site-packages on sys.path, and the editable install's finder is
    # appended to sys.meta_path after the path finder, so the unpacked wheel wins if it is complete.
    env = {**os.environ, "PYTHONPATH": str(site)}
    out = run_py("import fluxfs, fluxfs.pipes; print(fluxfs.pipes.__file__); print(fluxfs.__file__)",
                 env=env, cwd=str(tmp_path))
    pipes_file, fluxfs_file = out.splitlines()
    assert Path(pipes_file).resolve().is_relative_to(site.resolve()), pipes_file
    assert Path(fluxfs_file).resolve().is_relative_to(site.resolve()), fluxfs_file

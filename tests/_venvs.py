"""Real virtualenvs built in well under a second: the same base interpreter (`venv --without-pip`), with a
symlink to every entry of this venv's site-packages except the ones left out. Nothing is patched: what is
left out is not on disk for that interpreter, exactly as after a `pip install` that did not bring it."""
from __future__ import annotations

import importlib.metadata
import subprocess
import sys
import sysconfig
from pathlib import Path

# The torch extra of setup.cfg: what `pip install fluxfs` (no extra) does not bring.
TORCH_EXTRA = ("torch", "torchdata", "numpy", "braceexpand")


def dist_entries(*names: str) -> set[str]:
    """Top-level site-packages entries installed by these distributions (from their RECORD)."""
    entries: set[str] = set()
    for name in names:
        try:
            dist = importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:
            continue
        for file in dist.files or ():
            top = Path(file).parts[0]
            if top != "..":  # scripts under bin/ are outside site-packages
                entries.add(top)
    return entries


def editable_fluxfs_entries(site: Path) -> set[str]:
    """This venv's editable install of fluxfs: its finder, its .pth and its dist-info."""
    return {e.name for e in site.iterdir()
            if (e.name.startswith("__editable__") and "fluxfs" in e.name)
            or (e.name.startswith("fluxfs-") and e.name.endswith(".dist-info"))}


def venv_view(dest: Path, leave_out: set[str]) -> Path:
    """A virtualenv at `dest` seeing this venv's packages minus `leave_out`; returns its interpreter."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(dest)], check=True, timeout=60)
    python = dest / "bin" / "python"
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True).stdout.strip())
    for entry in ours().iterdir():
        if entry.name not in leave_out and not (site / entry.name).exists():
            (site / entry.name).symlink_to(entry)
    return python


def ours() -> Path:
    """This venv's site-packages."""
    return Path(sysconfig.get_paths()["purelib"])

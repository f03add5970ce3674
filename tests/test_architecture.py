"""The layout stays as docs/architecture.md draws it: layer contracts, no cycles, small modules,
and a repository that explains itself."""
from __future__ import annotations

import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
MAX_MODULE_LINES = 400


def test_import_contracts_hold():
    """.importlinter: cli > pipes > filesystem > shared base; the server stands alone; no torch below pipes; no cycles."""
    lint = pathlib.Path(sys.executable).with_name("lint-imports")
    out = subprocess.run([str(lint), "--config", ".importlinter", "--no-cache"], cwd=ROOT,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "0 broken" in out.stdout or "broken" not in out.stdout, out.stdout


def _tracked(*patterns: str) -> list[pathlib.Path]:
    names = subprocess.run(["git", "ls-files", *patterns], cwd=ROOT, capture_output=True, text=True,
                           check=True).stdout.split()
    return [ROOT / n for n in names]


def test_no_module_is_over_the_size_limit():
    too_big = {str(p.relative_to(ROOT)): n for p in _tracked("fluxfs/*.py", "pipes/*.py")
               if (n := len(p.read_text().splitlines())) > MAX_MODULE_LINES}
    assert not too_big, f"modules over {MAX_MODULE_LINES} lines (split them by job): {too_big}"


def test_nothing_cites_files_outside_the_repository():
    """Everything the project needs to explain itself lives in it: no pointers to notes kept elsewhere."""
    needles = ("REFERENCE.md", "BENCH.md", "../shared", "shared/compat")
    hits = [f"{p.relative_to(ROOT)}: {needle}" for p in _tracked() if p.is_file() and p.suffix in
            (".py", ".md", ".cfg", ".toml", ".ipynb", ".txt", "") and p.name != "test_architecture.py"
            for needle in needles if needle in p.read_text(errors="replace")]
    assert not hits, hits

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


def _cli_imports_of_pipes() -> list[tuple[str, str]]:
    """(CLI module, pipes module) for every ``fluxfs.pipes...`` import in fluxfs/cli, those inside functions too."""
    import ast

    found = []
    for path in sorted((ROOT / "fluxfs" / "cli").glob("*.py")):
        module = "fluxfs.cli" + ("" if path.stem == "__init__" else f".{path.stem}")
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module] if isinstance(node, ast.ImportFrom) and node.module and not node.level else []
            found += [(module, "pipes" + n[len("fluxfs.pipes"):]) for n in names
                      if n == "fluxfs.pipes" or n.startswith("fluxfs.pipes.")]
    return found


def test_the_clis_imports_of_pipes_are_checked_too():
    """pipes/ is installed as fluxfs.pipes but analysed as `pipes`, so import-linter cannot see the CLI's
    ``from fluxfs.pipes... import`` (it resolves them to `fluxfs`): add them as edges and check that they
    name real modules and close no cycle through the CLI (pipes never reaches fluxfs.cli)."""
    import grimp

    graph = grimp.build_graph("fluxfs", "pipes", cache_dir=None)
    edges = _cli_imports_of_pipes()
    assert ("fluxfs.cli.shards", "pipes.shards") in edges   # the scan finds the imports inside functions
    for importer, imported in edges:
        assert imported in graph.modules, f"{importer} imports fluxfs.{imported}, which does not exist"
        graph.add_import(importer=importer, imported=imported)
    assert not graph.chain_exists(importer="pipes", imported="fluxfs.cli", as_packages=True)
    assert not graph.chain_exists(importer="fluxfs.core", imported="pipes", as_packages=True)

"""The SLOW and ALONE lists of tests/conftest.py (what `make test-quick` leaves out; what `make test` runs after
the parallel workers) name tests that exist: a renamed test or file would otherwise drop out of a list silently."""
from __future__ import annotations

import ast
import functools
from pathlib import Path

import pytest

from tests.conftest import ALONE, SLOW, is_listed

ROOT = Path(__file__).resolve().parents[1]


@functools.lru_cache(maxsize=None)
def _names(path: Path) -> frozenset[str]:
    """`module::function` and `module::Class::method` names of a test file's tests."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    out = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            out.add(node.name)
        elif isinstance(node, ast.ClassDef):
            out |= {f"{node.name}::{m.name}" for m in node.body
                    if isinstance(m, (ast.FunctionDef, ast.AsyncFunctionDef))}
    return frozenset(out)


@pytest.mark.parametrize("entries", [SLOW, ALONE], ids=["SLOW", "ALONE"])
def test_every_entry_names_an_existing_file_or_test(entries):
    for entry in entries:
        file, _, test = entry.partition("::")
        assert (ROOT / file).is_file(), f"the list names {file}, which does not exist"
        if test:
            assert test in _names(ROOT / file), f"the list names {entry}, which {file} does not define"


def test_entries_match_whole_names_only():
    assert is_listed("tests/test_packaging.py::test_wheel_holds_every_package_and_no_top_level_pipes")
    assert is_listed("tests/cache/test_fs.py::test_two_processes_download_an_entry_once")
    assert is_listed("tests/pipes/test_datasets.py::test_map_dataset_dataloader_reads_every_object_once[0-64]")
    assert not is_listed("tests/cache/test_fs.py::test_two_processes_download_an_entry_once_more")
    assert not is_listed("tests/test_packaging_more.py::test_x")
    assert not is_listed("tests/cache/test_fs.py::test_something_quick")

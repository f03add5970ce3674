"""Each subpackage exports what users use, as README.md, docs/, the notebook and the benchmarks use it; its
internals are imported from their modules (by our own code and tests), not from the package."""
from __future__ import annotations

import importlib
import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]

PUBLIC = {
    "fluxfs.listing": {"LIST_FIELDS"},
    "fluxfs.reads": set(),
    "fluxfs.writes": {"FluxWriteFile"},
    "fluxfs.cache": {"NodeCache", "Fetcher", "cache_of"},
    "fluxfs.pipes.checkpoint": {"FluxCheckpoint", "FluxStorageWriter", "FluxStorageReader", "CheckpointSaveError",
                                "CheckpointChangedError", "IncompleteCheckpointError"},
    "fluxfs.pipes.data": {"ListObjects", "ReadObjects", "RankSplit", "FluxMapDataset", "FluxIterableDataset",
                          "FluxSampler", "ObjectMeta", "reader_states", "ResumeStateError", "AmbiguousPrefixWarning"},
    "fluxfs.pipes.distributed": {"NO_GROUP"},
    "fluxfs.pipes.shards": {"FluxShardDataset", "ReadShards", "ShardPieces", "ShardWriter", "ShardIndex",
                            "FluxShardMapDataset", "decode", "pack_prefix", "merge_parts", "MissingIndexWarning",
                            "ShardChanged", "ShardError", "SourceChangedError"},
    "fluxfs.pipes.weights": {"load_file", "save_file", "safe_open", "load_model_dir", "SafetensorsError"},
}


def _documented() -> str:
    files = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), *sorted((ROOT / "notebooks").glob("*.ipynb")),
             *sorted((ROOT / "bench").glob("*.py"))]
    return "\n".join(f.read_text() for f in files)


@pytest.mark.parametrize("package", sorted(PUBLIC))
def test_a_subpackage_exports_the_names_users_use_and_each_resolves(package):
    mod = importlib.import_module(package)
    assert sorted(mod.__all__) == sorted(PUBLIC[package]), f"{package}.__all__"
    assert len(set(mod.__all__)) == len(mod.__all__), f"{package}.__all__ names a name twice"
    namespace: dict = {}
    exec(f"from {package} import *", namespace)  # lazy names too (the package's __getattr__)
    assert set(PUBLIC[package]) <= set(namespace)
    docs = _documented()
    undocumented = [n for n in mod.__all__ if not re.search(rf"\b{re.escape(n)}\b", docs)]
    assert not undocumented, f"{package} exports names no user doc or benchmark uses: {undocumented}"


def test_every_subpackage_is_checked():
    """A new subpackage gets a row above (fluxfs.zonal, gcs, server and cli have their own checks)."""
    found = {f"fluxfs.{p.parent.name}" for p in (ROOT / "fluxfs").glob("*/__init__.py")}
    found |= {f"fluxfs.pipes.{p.parent.name}" for p in (ROOT / "pipes").glob("*/__init__.py")}
    assert found - {"fluxfs.zonal", "fluxfs.gcs", "fluxfs.server", "fluxfs.cli"} == set(PUBLIC)


def test_the_filesystem_has_no_public_plumbing():
    """URLs and retry policies are the client's (`fs.client`) and the options' (`fs.options.retry_policy`)."""
    from fluxfs import FluxFileSystem
    for name in ("json_url", "upload_url", "xml_url", "retry_policy", "counters"):
        assert not hasattr(FluxFileSystem, name), name

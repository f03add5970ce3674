"""Every error fluxfs.pipes defines has one base users can catch, `fluxfs.pipes.PipesError`, and keeps its
built-in base."""
from __future__ import annotations

import ast
import pickle
from pathlib import Path

import pytest

import fluxfs.pipes
from fluxfs.pipes import PipesError, ResumeStateError
from fluxfs.pipes.checkpoint import CheckpointChangedError, CheckpointSaveError, IncompleteCheckpointError
from fluxfs.pipes.checkpoint.errors import UnsafeCheckpointError
from fluxfs.pipes.safetensors import SafetensorsError
from fluxfs.pipes.shards import ShardChanged, ShardError, SourceChangedError
from fluxfs.pipes.shards.partfiles import IncompletePackError

ERRORS = [  # (an instance as pipes raises it, the built-in base it always had)
    (ShardError("bucket/shard-0.tar", 512, "truncated header"), ValueError),
    (ShardChanged("bucket/shard-0.tar", 512, "the shard changed while being read", "17"), ValueError),
    (CheckpointSaveError("flux://b/ckpt: upload failed"), OSError),
    (IncompleteCheckpointError("flux://b/ckpt has no .metadata"), FileNotFoundError),
    (CheckpointChangedError("flux://b/ckpt/__0_0.distcp was replaced"), RuntimeError),
    (UnsafeCheckpointError("flux://b/ckpt/.metadata names os.system"), pickle.UnpicklingError),
    (SafetensorsError("flux://b/model.safetensors: header too large"), ValueError),
    (ResumeStateError("FluxIterableDataset resume state must be a dict, not list"), ValueError),
    (IncompletePackError("cannot merge B/out/: 1 of 3 parts are not complete", [1]), FileNotFoundError),
    (SourceChangedError("b/img/a.jpg changed since part 0 pinned the listing", ["img/a.jpg"]), ValueError),
]


@pytest.mark.parametrize("exc, builtin", ERRORS, ids=lambda v: type(v).__name__ if isinstance(v, Exception) else "")
def test_every_pipes_error_has_the_common_base_and_its_builtin_one(exc, builtin):
    assert isinstance(exc, PipesError) and isinstance(exc, builtin)
    with pytest.raises(PipesError, match=str(exc).split(":")[0]):
        raise exc
    copy = pickle.loads(pickle.dumps(exc))  # DataLoader workers hand errors over pickled
    assert type(copy) is type(exc) and str(copy) == str(exc)


def test_every_error_class_in_pipes_is_covered():
    """Every exception class defined anywhere in fluxfs.pipes' source is in ERRORS (so a new one gets the base)."""
    root = Path(fluxfs.pipes.__file__).parent
    defined = set()
    for path in root.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef) and any(ast.unparse(b).endswith(("Error", "Exception"))
                                                      for b in node.bases):
                defined.add(node.name)
    assert defined == {type(e).__name__ for e, _ in ERRORS} | {"PipesError"}
    assert "PipesError" in fluxfs.pipes.__all__

"""`PipesError`: the one base of every error fluxfs.pipes defines, for code that catches them all.

Each error keeps its built-in base too (`ShardError` is still a ValueError, `IncompleteCheckpointError`
a FileNotFoundError, ...), so existing `except ValueError:` blocks go on working.
"""
from __future__ import annotations

__all__ = ["PipesError"]


class PipesError(Exception):
    """Base class of fluxfs.pipes' own errors (shards, checkpoints, safetensors weights)."""

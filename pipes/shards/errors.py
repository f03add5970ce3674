"""The error a bad shard raises: it names the shard and the byte offset where reading went wrong."""
from __future__ import annotations

from fluxfs.errors import ObjectChanged

from ..errors import PipesError


class ShardError(PipesError, ValueError):
    """A shard or its index is corrupt, truncated or stale; `shard` and `offset` say where."""

    def __init__(self, shard: str, offset: int | None, problem: str):
        self.shard = shard
        self.offset = offset
        self.problem = problem
        where = f" at byte {offset}" if offset is not None else ""
        super().__init__(f"{shard}{where}: {problem}")

    def __reduce__(self):  # keep the fields across DataLoader worker processes
        return type(self), (self.shard, self.offset, self.problem)


class ShardChanged(ShardError, ObjectChanged):
    """A shard overwritten or deleted while being read (a read pinned to its generation found it gone):
    a ShardError naming the shard, and fluxfs's ObjectChanged (so also a FileNotFoundError), as every
    reader of fluxfs raises for an object that changed."""

    def __init__(self, shard: str, offset: int | None, problem: str, generation: str | None = None):
        ShardError.__init__(self, shard, offset, problem)
        self.status, self.message, self.retry_after = 412, str(self.args[0]), None
        self.path, self.generation = shard, generation

    def __str__(self) -> str:
        return self.message

    def __reduce__(self):
        return type(self), (self.shard, self.offset, self.problem, self.generation)


class SourceChangedError(PipesError, ValueError):
    """Objects being packed changed (replaced or deleted) since the packing listed them: `keys` names them.

    Packing them anyway would mix two listings in one set of shards; nothing of the shard being written is kept.
    """

    def __init__(self, message: str, keys: list[str]):
        super().__init__(message)
        self.keys = list(keys)

    def __reduce__(self):  # Dask and process pools hand errors over pickled
        return type(self), (str(self), self.keys)

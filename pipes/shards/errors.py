"""The error a bad shard raises: it names the shard and the byte offset where reading went wrong."""
from __future__ import annotations

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

"""The filesystem a pipes object reads through, built in the process that uses it.

Datasets, catalogs and Nodes travel to DataLoader workers (forked or pickled); a gcsfs-based
filesystem is not fork-safe, so each process builds its own from `protocol` and `storage_options`.
"""
from __future__ import annotations

from typing import Any

import fsspec


class ProcessFilesystem:
    """Mixin: `fs` built on first use from `self.protocol` and `self.storage_options`; `_after_fork` drops it."""

    protocol: str
    storage_options: dict
    _fs: Any = None

    @property
    def fs(self) -> Any:
        """This process's filesystem (a forked or spawned worker builds its own)."""
        if self._fs is None:
            self._fs = fsspec.filesystem(self.protocol, **self.storage_options)
        return self._fs

    def _after_fork(self) -> None:
        self._fs = None

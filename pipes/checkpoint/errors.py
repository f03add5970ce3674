"""The errors checkpointing raises, and `upload_errors`, which keeps an upload's own error visible through
torch.save."""
from __future__ import annotations

import contextlib
import pickle
from typing import Any, Iterator

from fluxfs.errors import ObjectChanged

from ..errors import PipesError

__all__ = ["CheckpointSaveError", "IncompleteCheckpointError", "CheckpointChangedError", "UnsafeCheckpointError",
           "upload_errors"]


class CheckpointSaveError(PipesError, IOError):
    """A background checkpoint save failed; the message names the URL and `__cause__` holds the reason."""


class IncompleteCheckpointError(PipesError, FileNotFoundError):
    """The checkpoint has no ``.metadata``: it was never saved, or its save did not finish."""


class CheckpointChangedError(PipesError, RuntimeError, ObjectChanged):
    """A data file was replaced after its ``.metadata`` was read (a concurrent save to the same URL): also
    fluxfs's ObjectChanged, as every reader of fluxfs raises for an object that changed; `path`, `generation`."""

    def __init__(self, message: str, path: str | None = None, generation: str | None = None):
        ObjectChanged.__init__(self, message, path, generation)


class UnsafeCheckpointError(PipesError, pickle.UnpicklingError):
    """A checkpoint's ``.metadata`` names a callable that DCP metadata never holds: it was refused, not run."""


@contextlib.contextmanager
def upload_errors(handle: Any) -> Iterator[None]:
    """Re-raise the upload's own error (missing bucket, denied, server down) when torch.save hides it.

    torch.save's zip writer answers a write() that raised by failing its own end-of-file check
    ("unexpected pos 704 vs 598"), and that RuntimeError replaces the real one.
    """
    try:
        yield
    except RuntimeError as exc:
        error = getattr(handle, "error", None)
        if error is None or error is exc:
            raise
        raise error from exc

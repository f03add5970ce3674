"""``fluxfs.pipes.lightning``: `FluxCheckpointIO`, where users import it from (it lives in
`fluxfs.pipes.checkpoint.lightning`).

Needs the optional extra ``fluxfs[lightning]``; importing this without Lightning raises ImportError.
"""
from __future__ import annotations

from .checkpoint.lightning import FluxCheckpointIO

__all__ = ["FluxCheckpointIO"]

"""The ``fluxfs`` command line (console script ``fluxfs = fluxfs.cli:main``, also ``python -m fluxfs.cli``).

Layers, importing downward only: `entry` (main: exit codes and messages) -> `parser` (argparse)
-> the commands (`listing`: ls/du/manifest, `copying`: cat/cp, `maintenance`: mb/cleanup,
`launch`: serve/bench/demo) -> `storage` (the filesystem from the options) -> `base` (UsageError,
exit codes, URLs). `demo` is the training demo. This package imports fluxfs, fluxfs.server and
fluxfs.pipes; nothing in them imports it.
"""
from __future__ import annotations

from .base import UsageError
from .entry import main

__all__ = ["main", "UsageError"]

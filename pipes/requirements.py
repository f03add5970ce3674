"""fluxfs.pipes needs the `torch` extra; importing it without that extra says how to install it."""
from __future__ import annotations

import importlib

# What `pip install 'fluxfs[torch]'` adds to the plain filesystem (setup.cfg's `torch` extra).
TORCH_EXTRA = ("torch", "torchdata", "numpy", "braceexpand")
INSTALL_HINT = "fluxfs.pipes needs PyTorch: pip install 'fluxfs[torch]'"


def require_torch() -> None:
    """Import the extra's packages; one that is not installed raises ModuleNotFoundError naming the install command."""
    for name in TORCH_EXTRA:
        try:
            importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name != name:  # something inside an installed package is missing: not ours to explain
                raise
            detail = "" if name == "torch" else f" ({name} is not installed)"
            raise ModuleNotFoundError(INSTALL_HINT + detail, name=name) from exc

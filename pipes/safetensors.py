"""The import path `fluxfs.pipes.safetensors`: safetensors weights on ``flux://`` URLs (see `fluxfs.pipes.weights`)."""
from __future__ import annotations

from .weights import SafetensorsError, load_file, load_model_dir, safe_open, save_file

__all__ = ["load_file", "save_file", "safe_open", "load_model_dir", "SafetensorsError"]

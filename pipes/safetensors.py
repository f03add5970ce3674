"""The import path `fluxfs.pipes.safetensors`: safetensors weights on ``flux://`` URLs (see `fluxfs.pipes.weights`)."""
from __future__ import annotations

from .weights import SafetensorsError, TensorSlice, load_file, load_model_dir, safe_open, save_file

__all__ = ["load_file", "save_file", "safe_open", "TensorSlice", "load_model_dir", "SafetensorsError"]

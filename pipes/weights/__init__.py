"""fluxfs.pipes.weights: model weights in the safetensors format, read from and written to ``flux://`` URLs.

`load_file` / `save_file` / `safe_open` stand in for the safetensors package's calls (the same files,
both ways); `load_model_dir` loads a sharded Hugging Face model directory. Also importable as
`fluxfs.pipes.safetensors`.
"""
from __future__ import annotations

from .header import SafetensorsError
from .load import load_file, safe_open
from .model_dir import load_model_dir
from .save import save_file

__all__ = ["load_file", "save_file", "safe_open", "load_model_dir", "SafetensorsError"]

"""`decode(...)`: a transform for shard datasets that turns a sample's bytes into values by extension.

    dataset = FluxShardMapDataset(urls, transform=decode("jpg;png", "cls", image="torch"))

Images through Pillow (if installed), ``.cls`` as an int, ``.txt`` as text, ``.json`` parsed,
``.npy`` through numpy (no pickles), ``.pt`` through ``torch.load(weights_only=True)``; other
extensions stay bytes. A multi-part extension is decoded by its last part (``seg.png`` as png).
"""
from __future__ import annotations

import io
import json
from typing import Any, Callable, Mapping, Optional

from .errors import ShardError

IMAGE_EXTENSIONS = ("jpg", "jpeg", "png", "ppm", "pgm", "pbm", "pnm", "webp", "bmp", "gif", "tif", "tiff")
IMAGE_MODES = ("pil", "rgb", "numpy", "torch")


def _image(mode: str) -> Callable[[bytes], Any]:
    def load(data: bytes) -> Any:
        try:
            from PIL import Image
        except ImportError:
            raise ImportError("decoding images needs Pillow: pip install pillow "
                              "(or decode(..., image=None) to keep their bytes)") from None
        img = Image.open(io.BytesIO(data))
        img.load()
        if mode == "pil":
            return img
        img = img.convert("RGB")
        if mode == "rgb":
            return img
        import numpy as np

        arr = np.asarray(img)
        if mode == "numpy":
            return arr
        import torch

        return torch.from_numpy(arr.copy()).permute(2, 0, 1)
    return load


def _npy(data: bytes) -> Any:
    import numpy as np

    return np.load(io.BytesIO(data), allow_pickle=False)


def _pt(data: bytes) -> Any:
    import torch

    return torch.load(io.BytesIO(data), weights_only=True)


def _text(data: bytes) -> str:
    return data.decode("utf-8")


def default_handlers(image: Optional[str] = "pil") -> dict[str, Callable[[bytes], Any]]:
    """Extension -> function of the member's bytes."""
    handlers: dict[str, Callable[[bytes], Any]] = {
        "cls": lambda b: int(b), "cls2": lambda b: int(b), "index": lambda b: int(b),
        "txt": _text, "text": _text, "json": json.loads, "jsn": json.loads,
        "npy": _npy, "pt": _pt, "pth": _pt,
    }
    if image is not None:
        if image not in IMAGE_MODES:
            raise ValueError(f"image must be one of {IMAGE_MODES} or None (bytes), not {image!r}")
        handlers.update((ext, _image(image)) for ext in IMAGE_EXTENSIONS)
    return handlers


class Decoder:
    """Callable on a sample dict: every field decoded (a dict), or just `fields`, in order (a tuple)."""

    def __init__(self, fields: tuple[str, ...], handlers: Mapping[str, Callable[[bytes], Any]]):
        self.fields, self.handlers = fields, dict(handlers)

    def value(self, ext: str, data: Any) -> Any:
        if not isinstance(data, (bytes, bytearray, memoryview)):
            return data
        fn = self.handlers.get(ext) or self.handlers.get(ext.rsplit(".", 1)[-1])
        return data if fn is None else fn(bytes(data))

    def _one(self, sample: dict, ext: str) -> Any:
        try:
            return self.value(ext, sample[ext])
        except Exception as exc:  # named with the sample: a bad member is found at once
            raise ShardError(sample.get("__shard__", "?"), None,
                             f"sample {sample.get('__key__')!r}: cannot decode its {ext!r} member "
                             f"({type(exc).__name__}: {exc})") from exc

    def __call__(self, sample: dict) -> Any:
        if not self.fields:
            return {k: (v if k.startswith("__") else self._one(sample, k)) for k, v in sample.items()}
        out = []
        for spec in self.fields:
            ext = next((e for e in spec.split(";") if e in sample), None)
            if ext is None:
                have = ", ".join(k for k in sample if not k.startswith("__")) or "none"
                raise ShardError(sample.get("__shard__", "?"), None,
                                 f"sample {sample.get('__key__')!r} has no {spec!r} member (it has: {have})")
            out.append(self._one(sample, ext))
        return tuple(out)

    def __repr__(self) -> str:
        return f"decode({', '.join(map(repr, self.fields))})"


def decode(*fields: str, image: Optional[str] = "pil",
           handlers: Optional[Mapping[str, Callable[[bytes], Any]]] = None) -> Decoder:
    """A sample transform for `FluxShardMapDataset` / the shard iterable dataset.

    `fields`: extensions to return as a tuple, in order (``"jpg;png"``: whichever is present); none:
    the whole sample as a dict of decoded values. `image`: "pil" (as stored), "rgb" (PIL, RGB),
    "numpy" (HxWx3 uint8), "torch" (3xHxW uint8 tensor) or None (bytes). `handlers`: extension ->
    function of the bytes, overriding or adding to the defaults. A missing field or a member that
    does not decode is a `ShardError` naming the shard and the sample.
    """
    table = default_handlers(image)
    table.update(handlers or {})
    return Decoder(tuple(fields), table)

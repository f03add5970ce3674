"""A dataset's manifest as info dicts: the one place pipes reads manifests (`fluxfs` parses them)."""
from __future__ import annotations

from typing import Any, Optional

from fluxfs.support import read_manifest


def manifest_infos(where: str, fs: Any = None, base: Optional[str] = None) -> list[dict]:
    """Info dicts (name "bucket/key", size/generation/crc32c when the manifest has them, label) of `where`.

    Text labels that are integers become ints (what a loss function wants); others stay strings.
    """
    entries = [e.info() for e in read_manifest(where, fs=fs, base=base)]
    for e in entries:
        if isinstance(e.get("label"), str):
            e["label"] = _label(e["label"])
    return entries


def _label(text: str) -> Any:
    try:
        return int(text)
    except ValueError:
        return text

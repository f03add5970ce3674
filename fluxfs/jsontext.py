"""JSON we did not write (safetensors headers, index files, manifests, error bodies), parsed with one
failure type: `json.loads` raises RecursionError for deeply nested input ('[[[[…' 100k deep), which no
caller expects and which names nothing; here it is a `json.JSONDecodeError` like any other bad JSON."""
from __future__ import annotations

import json
from typing import Any, Union


def loads(text: Union[str, bytes, bytearray, memoryview]) -> Any:
    """`json.loads(text)`; JSON nested too deeply for the parser raises `json.JSONDecodeError`
    (a ValueError), as malformed JSON does, so the caller's message names its file."""
    if isinstance(text, memoryview):
        text = bytes(text)
    try:
        return json.loads(text)
    except RecursionError:
        doc = text if isinstance(text, str) else ""
        raise json.JSONDecodeError("nested too deeply to parse", doc, 0) from None

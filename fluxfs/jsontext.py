"""JSON we did not write (safetensors headers, index files, manifests, error bodies), parsed with one
failure type: `json.loads` raises RecursionError for deeply nested input ('[[[[…' 100k deep), which no
caller expects and which names nothing; here it is a `json.JSONDecodeError` like any other bad JSON.

Nesting is measured before parsing, without recursion: running into the interpreter's recursion limit
also breaks whatever else runs on that stack (finalizers, callbacks), so such input never reaches the
parser. The limit, 128 levels, is serde_json's, the safetensors package's own parser."""
from __future__ import annotations

import itertools
import json
import re
from typing import Any, Union

MAX_DEPTH = 128
_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"', re.S)
_NOT_BRACKETS = bytes(c for c in range(256) if c not in b"[]{}")


def _depth(data: bytes) -> int:
    """The deepest nesting of arrays and objects in `data` (brackets inside strings not counted)."""
    brackets = _STRING.sub(b"", data).translate(None, _NOT_BRACKETS)
    return max(itertools.accumulate(1 if c in b"[{" else -1 for c in brackets), default=0)


def loads(text: Union[str, bytes, bytearray, memoryview]) -> Any:
    """`json.loads(text)`; JSON nested deeper than `MAX_DEPTH` raises `json.JSONDecodeError` (a ValueError),
    as malformed JSON does, so the caller's message names its file."""
    if isinstance(text, memoryview):
        text = bytes(text)
    data = text.encode("utf-8", "surrogatepass") if isinstance(text, str) else bytes(text)
    if data.count(b"[") + data.count(b"{") > MAX_DEPTH and _depth(data) > MAX_DEPTH:
        raise _too_deep(text)
    try:
        return json.loads(text)
    except RecursionError:
        raise _too_deep(text) from None


def _too_deep(text: Any) -> json.JSONDecodeError:
    return json.JSONDecodeError("nested too deeply to parse", text if isinstance(text, str) else "", 0)

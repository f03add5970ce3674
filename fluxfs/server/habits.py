"""Habits of GCS-compatible servers we did not write, on demand, so the client is tested against them.

Set through the profile (``configure(omit_zero_fields=True, error_style="bare")``):

* ``omit_zero_fields``: JSON answers leave out zero-valued fields, as servers built on protobuf's
  JSON mapping do: a 0-byte object's resource and list items come without ``size``.
* ``error_style``: JSON API error bodies without ``errors[]``/``reason`` ("bare"), with a
  JSON-encoded ``message`` ("nested", a proxy wrapping its backend's answer), or as plain text.
"""
from __future__ import annotations

import json
from typing import Any, Dict

from .replies import JSON_CT, Reply

# int64 fields that the JSON API sends as strings: "0" is their zero value.
_INT64_FIELDS = frozenset(("size", "generation", "metageneration", "componentCount"))
# Values that are the user's, not the server's: never touched.
_USER_FIELDS = frozenset(("metadata", "name"))


def apply(reply: Reply, settings: Dict[str, Any], media: bool) -> Reply:
    """`reply` as a server with these habits would send it (unchanged under the default settings)."""
    body = reply.body
    if media or body is None or body.__class__ is list or reply.status == 304:
        return reply
    if not reply.headers.get("Content-Type", "").startswith("application/json"):
        return reply
    if reply.status >= 400:
        style = settings["error_style"]
        return reply if style == "gcs" else _styled_error(reply, style)
    if settings["omit_zero_fields"]:
        doc = json.loads(bytes(body))
        return Reply(reply.status, json.dumps(_without_zeros(doc), separators=(",", ":")).encode(),
                     reply.headers, reply.length)
    return reply


def _without_zeros(value: Any) -> Any:
    if isinstance(value, list):
        return [_without_zeros(v) for v in value]
    if not isinstance(value, dict):
        return value
    out = {}
    for k, v in value.items():
        if k in _USER_FIELDS:
            out[k] = v
        elif _is_zero(k, v):
            continue
        else:
            out[k] = _without_zeros(v)
    return out


def _is_zero(key: str, v: Any) -> bool:
    if v is None or v is False or (type(v) is int and v == 0):
        return True
    if isinstance(v, (str, list, dict)) and not v:
        return True
    return key in _INT64_FIELDS and v == "0"


def _styled_error(reply: Reply, style: str) -> Reply:
    try:
        err = json.loads(bytes(reply.body))["error"]
        code, message = err["code"], err["message"]
    except (ValueError, KeyError, TypeError):
        return reply
    if style == "text":
        return Reply(reply.status, f"{message}\n".encode(), {**reply.headers, "Content-Type": "text/plain"})
    if style == "bare":
        doc = {"error": {"code": code, "message": message}}
    else:  # nested: the whole GCS error, JSON-encoded, as the message
        doc = {"error": {"code": code, "message": json.dumps({"error": err})}}
    return Reply(reply.status, json.dumps(doc).encode(), {**reply.headers, "Content-Type": JSON_CT})

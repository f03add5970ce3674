"""What a route returns (``Reply``) and the JSON and XML replies every route shares, errors included."""
from __future__ import annotations

import json
from typing import Any, Dict, List, Optional, Union
from xml.sax.saxutils import escape

from .errors import ServerError

Body = Union[bytes, memoryview, List[memoryview], None]  # a list: pieces sent in order, never joined

JSON_CT = "application/json; charset=UTF-8"

# Compact JSON text, as GCS sends it: the same bytes as json.dumps(obj, separators=(",", ":")).
compact_json = json.JSONEncoder(separators=(",", ":")).encode


class Reply:
    """What a route returns; the dispatcher (app.py) turns it into bytes on the wire."""

    __slots__ = ("status", "headers", "body", "length")

    def __init__(self, status: int = 200, body: Body = b"", headers: Optional[Dict[str, str]] = None,
                 length: Optional[int] = None):
        self.status = status
        self.body = body
        self.headers = headers or {}
        self.length = length  # Content-Length to announce on HEAD (no body sent)


def json_reply(obj: Any, status: int = 200, headers: Optional[Dict[str, str]] = None) -> Reply:
    """``obj`` as compact JSON."""
    h = {"Content-Type": JSON_CT}
    if headers:
        h.update(headers)
    return Reply(status, compact_json(obj).encode(), h)


def json_error(code: int, message: str, reason: str) -> Reply:
    """A JSON API error body: {"error": {"code", "message", "errors": [...]}}."""
    return json_reply({"error": {"code": code, "message": message,
                                 "errors": [{"message": message, "domain": "global", "reason": reason}]}}, code)


def xml_error(code: int, xml_code: str, message: str) -> Reply:
    """An XML API error body: <Error><Code/><Message/></Error>."""
    body = ("<?xml version='1.0' encoding='UTF-8'?><Error><Code>%s</Code><Message>%s</Message></Error>"
            % (escape(xml_code), escape(message))).encode()
    return Reply(code, body, {"Content-Type": "application/xml; charset=UTF-8"})


def error_reply(err: ServerError, xml: bool) -> Reply:
    """``err`` as the API it answers speaks it (a 304 has no body in either)."""
    if err.code == 304:
        return Reply(304, b"")
    return xml_error(err.code, err.xml_code, err.message) if xml else json_error(err.code, err.message, err.reason)

"""What JSON API handlers read from a request (query parameters, preconditions, the JSON body,
writable metadata) and the object resource reply they send."""
from __future__ import annotations

import json
from typing import Any, Dict, Optional, Tuple

from aiohttp import web

from .errors import ServerError
from .fields import parse_fields
from .objects import EXTRA_FIELDS, Obj
from .objjson import object_json
from .replies import JSON_CT, Reply

# Query keys that name preconditions; a request carrying none of them skips parsing all eight.
_PRECOND_KEYS = frozenset(p + c + "Match" for p in ("if", "ifSource") for c in
                          ("Generation", "GenerationNot", "Metageneration", "MetagenerationNot"))


def int_param(q: Dict[str, str], key: str) -> Optional[int]:
    """The integer query parameter ``key`` (None when absent or empty); 400 when not a number."""
    v = q.get(key)
    if v is None or v == "":
        return None
    try:
        return int(v)
    except ValueError:
        raise ServerError(400, f"Invalid value for {key}: {v!r}", "invalidParameter") from None


def preconds(q: Dict[str, str], source: bool = False) -> Dict[str, Optional[int]]:
    """The if[Source](Meta)Generation(Not)Match parameters as check_preconditions() keywords."""
    if _PRECOND_KEYS.isdisjoint(q):
        return dict(_NO_PRECONDS)
    p = "ifSource" if source else "if"
    return {"if_gen": int_param(q, p + "GenerationMatch"), "if_gen_not": int_param(q, p + "GenerationNotMatch"),
            "if_meta": int_param(q, p + "MetagenerationMatch"),
            "if_meta_not": int_param(q, p + "MetagenerationNotMatch")}


_NO_PRECONDS: Dict[str, Optional[int]] = {"if_gen": None, "if_gen_not": None, "if_meta": None, "if_meta_not": None}


def base_url(request: web.Request) -> str:
    """scheme://host the client used: the prefix of selfLink and mediaLink."""
    return f"{request.scheme}://{request.host}"


def bool_param(q: Dict[str, str], key: str) -> bool:
    """True when the query parameter ``key`` is "true" (any case)."""
    return q.get(key, "").lower() == "true"


async def json_body(srv, request: web.Request) -> Dict[str, Any]:
    """The request body as a JSON object ({} when empty); 400 when it is not one."""
    raw = await srv.body(request)
    if not raw.strip():
        return {}
    try:
        body = json.loads(raw)
    except ValueError:
        raise ServerError(400, "Request body is not valid JSON.", "parseError") from None
    if not isinstance(body, dict):
        raise ServerError(400, "Request body must be a JSON object.", "invalid")
    return body


def resource_reply(request: web.Request, q: Dict[str, str], obj: Obj, bucket: str, status: int = 200) -> Reply:
    """The object's JSON resource, restricted to ``fields=`` if the query has it."""
    tree = parse_fields(q["fields"]) if "fields" in q else None
    return Reply(status, object_json(obj, bucket, base_url(request), tree).encode(), {"Content-Type": JSON_CT})


def meta_from(body: Dict[str, Any]) -> Tuple[Optional[str], Optional[Dict[str, str]], Dict[str, Any]]:
    """(contentType, metadata, other writable fields) of an object resource sent by a client."""
    md = body.get("metadata")
    if md is not None and not isinstance(md, dict):
        raise ServerError(400, "metadata must be an object of string values.", "invalid")
    if md:
        md = {str(k): str(v) for k, v in md.items() if v is not None}
    extra = {k: body[k] for k in EXTRA_FIELDS if body.get(k) is not None}
    return body.get("contentType"), md, extra

"""JSON API batch requests (POST /batch/storage/v1, multipart/mixed of up to 100 HTTP requests).

Each embedded request runs through the normal JSON routes (counted under its own op, with deny
rules and auth applied); the answers go back as one multipart/mixed body, as GCS does.
"""
from __future__ import annotations

import email.parser
import secrets
from typing import Any, Callable, Dict, List, Tuple
from urllib.parse import parse_qsl, urlsplit

from aiohttp import web
from multidict import CIMultiDict

from .admission import bearer, check_access
from .errors import ServerError
from .replies import Reply, error_reply

MAX_BATCH = 100  # GCS's limit of calls per batch request
# (method, raw path, query) -> (op name, handler): json_routes.route, passed in by it.
Router = Callable[[str, str, Dict[str, str]], Tuple[str, Callable[..., Any]]]


class _SubRequest:
    """The slice of aiohttp's Request that the routes use, for one embedded request."""

    def __init__(self, outer, method: str, raw_path: str, headers: CIMultiDict, body: bytes):
        self.method, self.raw_path, self.headers, self._body = method, raw_path, headers, body
        self.path = raw_path.partition("?")[0]
        self.scheme, self.host = outer.scheme, outer.host
        self.can_read_body = bool(body)

    async def read(self) -> bytes:
        return self._body


def _parse(body: bytes, ctype: str) -> List[Tuple[str, str, CIMultiDict, bytes, str]]:
    msg = email.parser.BytesParser().parsebytes(b"Content-Type: " + ctype.encode("latin-1") + b"\r\n\r\n" + body)
    if not msg.is_multipart():
        raise ServerError(400, "A batch request must be multipart/mixed.")
    out = []
    for i, part in enumerate(msg.get_payload(), 1):
        raw = part.get_payload(decode=True) or b""
        head, _, sub_body = raw.replace(b"\r\n", b"\n").partition(b"\n\n")
        lines = head.decode("latin-1").split("\n")
        try:
            method, target, _ = lines[0].split(" ", 2)
        except ValueError:
            raise ServerError(400, f"Batch part {i}: bad request line {lines[0]!r}") from None
        hdrs = CIMultiDict()
        for line in lines[1:]:
            if ":" in line:
                k, v = line.split(":", 1)
                hdrs.add(k.strip(), v.strip())
        u = urlsplit(target)
        path = u.path + ("?" + u.query if u.query else "")
        cid = (part.get("Content-ID") or f"<{i}>").strip()
        out.append((method.upper(), path, hdrs, sub_body.rstrip(b"\n"), cid))
    if len(out) > MAX_BATCH:
        raise ServerError(400, f"A batch may hold at most {MAX_BATCH} calls, got {len(out)}.")
    return out


async def handle_batch(srv, request: web.Request, q: Dict[str, str], route: Router) -> Reply:
    """Run each embedded call through ``route`` (json_routes.route) and answer them all in one body."""
    body = await srv.body(request)
    answers = []
    for method, path, hdrs, sub_body, cid in _parse(body, request.headers.get("Content-Type", "")):
        raw_path, _, query = path.partition("?")
        sq: Dict[str, str] = dict(parse_qsl(query, keep_blank_values=True, errors="surrogateescape"))
        try:
            op, handler = route(method, raw_path, sq)
            srv.requests[op] += 1
            # The batch's own token (GCS takes each call's from the outer request), deny rules: as for any request.
            check_access(srv.profile, op, bearer(request.headers.get("Authorization")),
                         method not in ("GET", "HEAD"))
            reply = await handler(srv, _SubRequest(request, method, path, hdrs, sub_body), sq)
        except ServerError as e:
            reply = error_reply(e, False)
        answers.append((cid, reply))
    boundary = "batch_" + secrets.token_hex(12)
    out = []
    for cid, reply in answers:
        cid = cid.strip("<>")
        head = [f"--{boundary}", "Content-Type: application/http", f"Content-ID: <response-{cid}>", "",
                f"HTTP/1.1 {reply.status} {_REASON.get(reply.status, 'Status')}"]
        head += [f"{k}: {v}" for k, v in reply.headers.items()]
        payload = b"".join(reply.body) if reply.body.__class__ is list else bytes(reply.body or b"")
        head += [f"Content-Length: {len(payload)}", "", ""]
        out.append("\r\n".join(head).encode() + payload + b"\r\n")
    out.append(f"--{boundary}--\r\n".encode())
    return Reply(200, b"".join(out), {"Content-Type": f"multipart/mixed; boundary={boundary}"})


_REASON = {200: "OK", 204: "No Content", 400: "Bad Request", 401: "Unauthorized", 403: "Forbidden",
           404: "Not Found", 409: "Conflict", 412: "Precondition Failed", 429: "Too Many Requests"}

"""A tiny raw-HTTP client for wire-level conformance tests (no GCS client library involved).

Each call opens one `http.client` connection: no redirects are followed (a 308 from a
resumable upload must reach the test as a 308), no retries, nothing hidden.
"""
from __future__ import annotations

import base64
import hashlib
import http.client
import json as jsonlib
import urllib.parse
from dataclasses import dataclass
from typing import Any, Mapping

import google_crc32c


@dataclass
class Reply:
    """One HTTP response: status, headers (lower-cased names), raw body."""

    status: int
    headers: Mapping[str, str]
    body: bytes

    def json(self) -> Any:
        return jsonlib.loads(self.body)

    def header(self, name: str, default: str | None = None) -> str | None:
        return self.headers.get(name.lower(), default)

    def __repr__(self) -> str:  # keeps assertion messages short but useful
        return f"<Reply {self.status} {self.body[:300]!r}>"


def quote(name: str) -> str:
    """Percent-encode an object name as one path segment (slashes included), as GCS requires."""
    return urllib.parse.quote(name, safe="")


def crc32c_b64(data: bytes) -> str:
    """GCS's crc32c field: big-endian CRC32C, base64."""
    return base64.b64encode(google_crc32c.Checksum(data).digest()).decode()


def md5_b64(data: bytes) -> str:
    return base64.b64encode(hashlib.md5(data).digest()).decode()


class Wire:
    """Raw HTTP against one server URL (e.g. ``http://127.0.0.1:PORT``)."""

    def __init__(self, url: str, timeout: float = 60):
        parsed = urllib.parse.urlsplit(url)
        self.url = url.rstrip("/")
        self.host = parsed.hostname
        self.port = parsed.port
        self.timeout = timeout

    def request(self, method: str, path: str, *, params: Mapping[str, Any] | None = None,
                headers: Mapping[str, str] | None = None, body: bytes | None = None,
                json: Any = None) -> Reply:
        """Send one request; `path` is already percent-encoded; returns whatever status comes back."""
        hdrs = dict(headers or {})
        if json is not None:
            body = jsonlib.dumps(json).encode()
            hdrs.setdefault("Content-Type", "application/json")
        if params:
            path = path + ("&" if "?" in path else "?") + urllib.parse.urlencode(
                {k: v for k, v in params.items() if v is not None})
        if body is None and method in ("POST", "PUT", "PATCH"):
            body = b""
        conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
        try:
            conn.request(method, path, body=body, headers=hdrs)
            resp = conn.getresponse()
            data = resp.read()
            return Reply(resp.status, {k.lower(): v for k, v in resp.getheaders()}, data)
        finally:
            conn.close()

    # -- JSON API helpers (paths as GCS documents them) -----------------------------------

    def obj_path(self, bucket: str, name: str) -> str:
        return f"/storage/v1/b/{bucket}/o/{quote(name)}"

    def upload_media(self, bucket: str, name: str, data: bytes, **params: Any) -> Reply:
        """objects.insert with uploadType=media."""
        return self.request("POST", f"/upload/storage/v1/b/{bucket}/o",
                            params={"uploadType": "media", "name": name, **params},
                            headers={"Content-Type": "application/octet-stream"}, body=data)

    def put(self, bucket: str, name: str, data: bytes, **params: Any) -> dict:
        """Upload and insist it worked; returns the object resource."""
        r = self.upload_media(bucket, name, data, **params)
        assert r.status == 200, r
        return r.json()

    def upload_multipart(self, bucket: str, metadata: dict, data: bytes,
                         content_type: str = "application/octet-stream", **params: Any) -> Reply:
        """objects.insert with uploadType=multipart (multipart/related: JSON metadata, then bytes)."""
        boundary = "==conformance-boundary=="
        body = (f"--{boundary}\r\nContent-Type: application/json; charset=UTF-8\r\n\r\n"
                f"{jsonlib.dumps(metadata)}\r\n--{boundary}\r\nContent-Type: {content_type}\r\n\r\n"
                ).encode() + data + f"\r\n--{boundary}--\r\n".encode()
        return self.request("POST", f"/upload/storage/v1/b/{bucket}/o",
                            params={"uploadType": "multipart", **params},
                            headers={"Content-Type": f'multipart/related; boundary="{boundary}"'},
                            body=body)

    def get_meta(self, bucket: str, name: str, **params: Any) -> Reply:
        return self.request("GET", self.obj_path(bucket, name), params=params or None)

    def get_media(self, bucket: str, name: str, headers: Mapping[str, str] | None = None,
                  **params: Any) -> Reply:
        return self.request("GET", self.obj_path(bucket, name), params={"alt": "media", **params},
                            headers=headers)

    def delete(self, bucket: str, name: str, **params: Any) -> Reply:
        return self.request("DELETE", self.obj_path(bucket, name), params=params or None)

    def list(self, bucket: str, **params: Any) -> Reply:
        return self.request("GET", f"/storage/v1/b/{bucket}/o", params=params or None)

    def list_all(self, bucket: str, **params: Any) -> tuple[list[dict], list[dict]]:
        """Follow nextPageToken to the end: (all items, the raw pages)."""
        items: list[dict] = []
        pages: list[dict] = []
        token = None
        while True:
            r = self.list(bucket, pageToken=token, **params)
            assert r.status == 200, r
            page = r.json()
            pages.append(page)
            items.extend(page.get("items", []))
            token = page.get("nextPageToken")
            if not token:
                return items, pages
            assert len(pages) < 10_000, "listing never ends"

    def compose(self, bucket: str, dest: str, sources: list, destination: dict | None = None,
                **params: Any) -> Reply:
        """objects.compose; `sources` are names or {"name", "generation", ...} dicts."""
        src = [s if isinstance(s, dict) else {"name": s} for s in sources]
        body = {"sourceObjects": src, "destination": destination or {"contentType": "application/octet-stream"}}
        return self.request("POST", f"{self.obj_path(bucket, dest)}/compose", params=params or None, json=body)


def assert_gcs_error(reply: Reply, code: int) -> dict:
    """GCS's JSON error shape: {"error": {"code": N, "message": str, "errors": [{"message", "reason", ...}]}}."""
    assert reply.status == code, reply
    body = reply.json()
    err = body["error"]
    assert err["code"] == code, body
    assert isinstance(err["message"], str) and err["message"], body
    assert isinstance(err["errors"], list) and err["errors"], body
    for e in err["errors"]:
        assert isinstance(e.get("message"), str), body
        assert isinstance(e.get("reason"), str), body
    return err

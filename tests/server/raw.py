"""Raw HTTP to the server under test (http.client: no proxies, no retries, nothing hidden)."""
from __future__ import annotations

import http.client
import json
from typing import Any, Dict, Optional
from urllib.parse import quote, urlencode, urlsplit


class Resp:
    def __init__(self, status: int, headers: Dict[str, str], body: bytes):
        self.status, self.headers, self.body = status, headers, body

    def json(self) -> Any:
        return json.loads(self.body)

    def __repr__(self) -> str:
        return f"<Resp {self.status} {self.body[:200]!r}>"


def request(url: str, method: str, path: str, body: Optional[bytes] = None, headers: Optional[Dict[str, str]] = None,
            params: Optional[Dict[str, Any]] = None, timeout: float = 30) -> Resp:
    u = urlsplit(url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=timeout)
    try:
        if params:
            path += "?" + urlencode(params)
        conn.request(method, path, body=body, headers=headers or {})
        r = conn.getresponse()
        data = r.read()
        return Resp(r.status, {k.lower(): v for k, v in r.getheaders()}, data)
    finally:
        conn.close()


def obj_path(bucket: str, name: str) -> str:
    return f"/storage/v1/b/{bucket}/o/{quote(name, safe='')}"


def xml_path(bucket: str, name: str) -> str:
    return f"/{bucket}/{quote(name, safe='')}"


def upload(url: str, bucket: str, name: str, data: bytes, **params) -> Resp:
    return request(url, "POST", f"/upload/storage/v1/b/{bucket}/o", data,
                   params={"uploadType": "media", "name": name, **params})


def list_all(url: str, bucket: str, **params) -> tuple:
    """All (names, prefixes, pages) of a listing, following nextPageToken."""
    names, prefixes, pages = [], [], 0
    params = dict(params)
    while True:
        r = request(url, "GET", f"/storage/v1/b/{bucket}/o", params=params)
        assert r.status == 200, r
        page = r.json()
        pages += 1
        names += [i["name"] for i in page.get("items", [])]
        prefixes += page.get("prefixes", [])
        if "nextPageToken" not in page:
            return names, prefixes, pages
        params["pageToken"] = page["nextPageToken"]

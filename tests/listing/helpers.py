"""Helpers for the listing tests: fill a bucket with given keys, list it plainly page by page."""
from __future__ import annotations

import json
import urllib.parse
import urllib.request


def put_keys(fs, bucket: str, keys) -> None:
    """Create one small object per key (content = the key's UTF-8 bytes), concurrently."""
    fs.pipe({f"{bucket}/{k}": k.encode("utf-8") for k in keys})


def sequential_names(url: str, bucket: str, prefix: str = "") -> list[str]:
    """A plain sequential objects.list over raw HTTP: the reference the fast lister must match."""
    names, token = [], None
    while True:
        q = {"maxResults": "1000"}
        if prefix:
            q["prefix"] = prefix
        if token:
            q["pageToken"] = token
        u = f"{url}/storage/v1/b/{urllib.parse.quote(bucket, safe='')}/o?{urllib.parse.urlencode(q)}"
        with urllib.request.urlopen(u, timeout=60) as r:
            page = json.loads(r.read())
        names += [it["name"] for it in page.get("items", [])]
        token = page.get("nextPageToken")
        if not token:
            return names


def listed_names(fs, path: str, **kwargs) -> list[str]:
    """Every name the fast lister yields (bucket/key), in yield order."""
    return [o["name"] for batch in fs.iter_objects(path, **kwargs) for o in batch]

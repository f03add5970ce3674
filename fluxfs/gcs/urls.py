"""Endpoint URLs and object names: the one place that parses them."""
from __future__ import annotations

import os
from typing import Optional
from urllib.parse import SplitResult, urlsplit


def split_endpoint(endpoint: str) -> SplitResult:
    """An endpoint as given to `--endpoint` or STORAGE_EMULATOR_HOST ("host:port" or "http://host:port")."""
    return urlsplit(endpoint if "://" in endpoint else f"http://{endpoint}")


def normalize_endpoint(endpoint: str) -> str:
    """An endpoint in either form ("host:port" or "http://host:port") as a URL: "http://host:port".

    STORAGE_EMULATOR_HOST is commonly set without a scheme; `--endpoint` and ``endpoint_url``
    accept the same forms, so the one value works everywhere.
    """
    endpoint = str(endpoint).strip()
    return endpoint if "://" in endpoint else f"http://{endpoint}"


def is_loopback(endpoint_url: Optional[str]) -> bool:
    """True when the endpoint (or, without one, STORAGE_EMULATOR_HOST) is an address on this machine."""
    url = endpoint_url or os.environ.get("STORAGE_EMULATOR_HOST", "")
    if not url:
        return False
    host = split_endpoint(url).hostname or ""
    return host in ("localhost", "::1") or host.startswith("127.")


def split_name(name: str) -> tuple[str, str]:
    """("bucket", "key") from an info dict's "bucket/key" name (no protocol, no generation)."""
    bucket, _, key = name.partition("/")
    return bucket, key

"""Names for the temporary objects fluxfs creates (composites, compose-mode upload parts).

All live under one reserved prefix so the lister can hide them and `fluxfs cleanup` can
find leftovers of crashed jobs. A job id carries the creation time, host, pid and a random
part, so concurrent jobs (even on one host, even after a pid is reused) never collide.
"""
from __future__ import annotations

import os
import secrets
import socket
import time

TEMP_PREFIX = "_fluxfs-tmp/"


def new_job_id() -> str:
    """A job id unique across hosts and processes: <unix-seconds>-<host>-<pid>-<random>."""
    host = "".join(c for c in socket.gethostname() if c.isalnum())[:16] or "host"
    return f"{int(time.time())}-{host}-{os.getpid()}-{secrets.token_hex(4)}"


def temp_key(job_id: str, kind: str) -> str:
    """A fresh object key under the reserved prefix, e.g. `_fluxfs-tmp/compose/<job>/<random>`."""
    return f"{TEMP_PREFIX}{kind}/{job_id}/{secrets.token_hex(8)}"


def job_started_at(key: str) -> float | None:
    """The creation time encoded in a temporary key's job id, or None if it has none."""
    parts = key[len(TEMP_PREFIX):].split("/")
    if len(parts) < 2:
        return None
    try:
        return float(parts[1].split("-", 1)[0])
    except ValueError:
        return None

"""Names of the temporary objects fluxfs creates (composites, compose-mode upload parts), and how to
tell them from a user's objects.

All live under one reserved prefix (`TEMP_PREFIX` by default; the `temp_prefix` option) and are named
``<prefix><kind>/<job id>/<16 hex digits>``; each carries the custom metadata ``fluxfs-temporary: <job
id>`` set when it is created. Listings hide only names of that exact shape, and `fluxfs cleanup`
deletes only objects with both the shape and the marker: anything else a user put under the prefix
is theirs. A generated job id carries the creation time, host, pid and a random part, so concurrent
jobs (even on one host, even after a pid is reused) never collide.
"""
from __future__ import annotations

import functools
import os
import re
import secrets
import socket
import time
from typing import Any, Mapping

TEMP_PREFIX = "_fluxfs-tmp/"
MARKER_KEY = "fluxfs-temporary"   # custom metadata key set on every temporary at creation: value = job id

_KIND = r"[a-z]{2,16}"
_JOB = r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}"
_LEAF = r"[0-9a-f]{16}"


def new_job_id() -> str:
    """A job id unique across hosts and processes: <unix-seconds>-<host>-<pid>-<random>."""
    host = "".join(c for c in socket.gethostname() if c.isalnum())[:16] or "host"
    return f"{int(time.time())}-{host}-{os.getpid()}-{secrets.token_hex(4)}"


def check_job_id(job_id: str) -> str:
    """`job_id` if it can name temporaries (letters, digits, '.', '_', '-'; at most 100), else ValueError."""
    if not isinstance(job_id, str) or not re.fullmatch(_JOB, job_id):
        raise ValueError(f"job_id must be 1-100 letters, digits, '.', '_' or '-' (starting with a letter or "
                         f"digit), not {job_id!r}: it names this job's temporary objects")
    return job_id


# GCS object names are at most 1,024 bytes of UTF-8; a temporary's name adds to the prefix at most a
# kind (16), a job id (100), two slashes and 16 hex digits.
MAX_NAME_BYTES = 1024
MAX_PREFIX_BYTES = MAX_NAME_BYTES - (16 + 1 + 100 + 1 + 16)
_ACME = ".well-known/acme-challenge/"   # GCS refuses object names starting with it


def check_prefix(prefix: str) -> str:
    """`prefix` if it can hold temporaries: a non-empty key prefix ending in '/', no control characters,
    short enough for every temporary's name to fit GCS's limit; else ValueError naming the option."""
    if not isinstance(prefix, str) or not prefix.endswith("/") or prefix.startswith("/") or prefix == "/" \
            or "//" in prefix or any(ord(c) < 32 or 127 <= ord(c) < 160 for c in prefix):
        raise ValueError(f"temp_prefix must be a key prefix ending in '/', such as {TEMP_PREFIX!r}, not {prefix!r}")
    try:
        size = len(prefix.encode("utf-8"))
    except UnicodeEncodeError:
        raise ValueError(f"temp_prefix must be valid Unicode text (GCS object names are UTF-8), not "
                         f"{prefix!r:.200}") from None
    if size > MAX_PREFIX_BYTES:
        raise ValueError(f"temp_prefix must be at most {MAX_PREFIX_BYTES} bytes (UTF-8) so that "
                         f"'<temp_prefix><kind>/<job_id>/<16 hex>' fits GCS's {MAX_NAME_BYTES}-byte object name "
                         f"limit, not {size} bytes ({prefix[:40]!r}...)")
    if prefix.startswith(_ACME):
        raise ValueError(f"temp_prefix must not start with {_ACME!r} (GCS refuses such object names), "
                         f"not {prefix!r}")
    return prefix


def temp_key(job_id: str, kind: str, prefix: str = TEMP_PREFIX) -> str:
    """A fresh object key under the reserved prefix, e.g. `_fluxfs-tmp/compose/<job>/<16 hex>`."""
    return f"{prefix}{kind}/{job_id}/{secrets.token_hex(8)}"


def marker(job_id: str) -> dict[str, str]:
    """The custom metadata every temporary of `job_id` is created with."""
    return {MARKER_KEY: job_id}


@functools.lru_cache(maxsize=16)
def _pattern(prefix: str) -> "re.Pattern[str]":
    return re.compile(f"{re.escape(prefix)}{_KIND}/({_JOB})/{_LEAF}")


def job_of(key: str, prefix: str = TEMP_PREFIX) -> str | None:
    """The job id in a temporary's key, or None when `key` is not named like a temporary."""
    if not key.startswith(prefix):
        return None
    m = _pattern(prefix).fullmatch(key)
    return m.group(1) if m else None


def is_temporary_name(key: str, prefix: str = TEMP_PREFIX) -> bool:
    """Whether `key` is named like a fluxfs temporary (what listings hide)."""
    return job_of(key, prefix) is not None


def is_marked(key: str, metadata: Mapping[str, Any] | None, prefix: str = TEMP_PREFIX) -> bool:
    """Named like a temporary *and* marked as one by the job its name holds (what cleanup may delete)."""
    job = job_of(key, prefix)
    return job is not None and (metadata or {}).get(MARKER_KEY) == job


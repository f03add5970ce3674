"""Credentials out of every text a user can see: messages, exceptions (and their causes), log records.

Secrets reach text through URLs (gcsfs looks a raw token's expiry up at ``.../tokeninfo?access_token=...``
and requests' errors quote that URL), headers (``Authorization: Bearer ...``) and credential JSON.
``redact`` masks them by shape, so it needs no list of the tokens in use.
"""
from __future__ import annotations

import contextlib
import logging
import re
from typing import Any, TypeVar

MASK = "[REDACTED]"

# Query or form parameters whose value is a credential (signed URLs' signature included).
_PARAMS = r"access_token|refresh_token|id_token|client_secret|assertion|x-goog-signature|x-goog-credential"
_PATTERNS = [
    (re.compile(rf"(?i)\b({_PARAMS})=[^&\s'\"<>,;)]+"), rf"\1={MASK}"),
    (re.compile(rf"(?i)([\"']?\b(?:{_PARAMS}|private_key|token)[\"']?\s*:\s*)([\"'])(?:\\.|(?!\2).)+\2"),
     rf"\1\2{MASK}\2"),
    # A bearer credential (RFC 6750 token68 characters), not prose such as "missing bearer token".
    (re.compile(r"(?i)\b(bearer)\s+(?!tokens?\b)[\w\-.~+/]{8,}=*"), rf"\1 {MASK}"),
    (re.compile(r"\bya29\.[\w.\-]+"), f"ya29.{MASK}"),             # Google OAuth access tokens
    (re.compile(r"\b1//[\w\-]{20,}"), f"1//{MASK}"),                # Google OAuth refresh tokens
    (re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]*?(?:-----END [A-Z ]*PRIVATE KEY-----|$)"),
     f"{MASK} private key"),
]


def redact(text: str) -> str:
    """``text`` with every credential-shaped part replaced by ``[REDACTED]``."""
    if not isinstance(text, str):
        text = str(text)
    for pattern, repl in _PATTERNS:
        text = pattern.sub(repl, text)
    return text


E = TypeVar("E", bound=BaseException)


def scrub(exc: E) -> E:
    """Redact ``exc`` in place, with its causes and contexts (what a traceback prints): string
    arguments, string attributes and notes; an argument that is itself an object whose text holds
    a secret (urllib3's MaxRetryError inside requests' ConnectionError) becomes its redacted text."""
    seen, cur = set(), exc
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        _scrub_one(cur)
        cur = cur.__cause__ or cur.__context__
    return exc


def _scrub_one(exc: BaseException) -> None:
    try:
        args = tuple(_clean(a) for a in exc.args)
        if args != exc.args:
            exc.args = args
    except Exception:  # an exception type that refuses new args: leave it, its attributes still get done
        pass
    for key, value in list(getattr(exc, "__dict__", {}).items()):
        if isinstance(value, str) and redact(value) != value:
            with contextlib.suppress(Exception):
                setattr(exc, key, redact(value))
    notes = getattr(exc, "__notes__", None)
    if isinstance(notes, list):
        notes[:] = [redact(n) if isinstance(n, str) else n for n in notes]


def _clean(arg: Any) -> Any:
    if isinstance(arg, str):
        return redact(arg)
    if isinstance(arg, (int, float, bytes, type(None))):
        return arg
    try:
        text = str(arg)
    except Exception:
        return arg
    clean = redact(text)
    return arg if clean == text else clean


class scrubbing:  # used like a function: `with scrubbing():` / `async with scrubbing():`
    """Exceptions leaving the block are redacted (in place) before they go on; sync or async."""

    def __enter__(self) -> "scrubbing":
        return self

    def __exit__(self, typ, exc, tb) -> bool:
        if exc is not None:
            scrub(exc)
        return False

    async def __aenter__(self) -> "scrubbing":
        return self

    async def __aexit__(self, typ, exc, tb) -> bool:
        return self.__exit__(typ, exc, tb)


class RedactFilter(logging.Filter):
    """A logging filter that redacts each record's message (formatted with its arguments) and exception."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # a bad format string: leave it for logging to report
            return True
        clean = redact(message)
        if clean != message:
            record.msg, record.args = clean, None
        if record.exc_info and record.exc_info[1] is not None:
            scrub(record.exc_info[1])
            record.exc_text = None
        return True


_FILTER = RedactFilter()

# Loggers of the libraries under fluxfs that log URLs or request details at DEBUG (urllib3 logs
# gcsfs's tokeninfo URL, token included).
THIRD_PARTY_LOGGERS = ("urllib3.connectionpool", "gcsfs", "gcsfs.core", "gcsfs.credentials", "gcsfs.retry",
                       "google.auth.transport.requests", "google.auth._default", "google.auth.compute_engine",
                       "aiohttp.client", "aiohttp.internal", "fsspec", "requests")


def get_logger(name: str) -> logging.Logger:
    """``logging.getLogger(name)`` whose records are redacted (fluxfs's modules take theirs here)."""
    logger = logging.getLogger(name)
    if _FILTER not in logger.filters:
        logger.addFilter(_FILTER)
    return logger


def protect_third_party_loggers() -> None:
    """Redact the records of the libraries fluxfs drives (a filter on each logger; idempotent)."""
    for name in THIRD_PARTY_LOGGERS:
        get_logger(name)

"""One log line, with its reason, for each request aiohttp could not handle (a client that went away: none).

aiohttp logs ``Error handling request from ADDR`` with the reason only in a traceback (dropped
by ``fluxfs serve``'s log format) and a TLS handshake only at debug level: a person then sees a
bare error line, or nothing, after pointing https:// or a non-HTTP client at the port.
"""
from __future__ import annotations

import logging

from aiohttp.http_exceptions import BadHttpMethod, HttpProcessingError

_LOGGER = "aiohttp.server"


def _reason(exc: BaseException) -> str:
    """What was wrong with the bytes received, in one line."""
    if isinstance(exc, BadHttpMethod) and (str(exc.line).startswith("\x16\x03")
                                           or "HTTPS traffic" in str(exc.message)):
        return "a TLS (https://) handshake sent to this plain HTTP server: use an http:// URL"
    if isinstance(exc, HttpProcessingError):
        # aiohttp's messages span lines (the offending bytes, then a caret under them).
        lines = [ln.strip() for ln in str(exc.message).splitlines() if ln.strip() and set(ln.strip()) != {"^"}]
        return "malformed HTTP request: " + " ".join(lines)
    return f"{type(exc).__name__}: {' '.join(str(exc).split())}"


class _OneLine(logging.Filter):
    """Rewrites aiohttp's "Error handling request" records into one line naming the reason."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.msg != "Error handling request from %s" or not record.exc_info:
            return record.levelno >= logging.WARNING
        exc = record.exc_info[1]
        remote = record.args[0] if isinstance(record.args, tuple) and record.args else "?"
        if isinstance(exc, ConnectionError):  # the client went away mid-request (Ctrl-C, a kill): no error of ours
            logging.getLogger("fluxfs.server").debug("the client at %s went away mid-request (%s)", remote,
                                                     _reason(exc))
            return False
        record.msg, record.args = "fluxfs server: refused a request from %s: %s", (remote, _reason(exc))
        if isinstance(exc, HttpProcessingError):  # bad bytes from a client, not a server bug: no traceback
            record.exc_info, record.exc_text = None, None
            record.levelno, record.levelname = logging.WARNING, "WARNING"
        return True


def install() -> None:
    """Install the filter on aiohttp's server logger (once); debug records of aiohttp stay dropped
    except the TLS-handshake one, which aiohttp logs at debug level."""
    log = logging.getLogger(_LOGGER)
    if not any(isinstance(f, _OneLine) for f in log.filters):
        log.addFilter(_OneLine())
        if log.level == logging.NOTSET or log.level > logging.DEBUG:
            log.setLevel(logging.DEBUG)

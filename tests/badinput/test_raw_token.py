"""A raw OAuth token never shows in a message, an exception (with its causes and traceback) or a log record,
even when the lookup of its expiry fails and every logger runs at DEBUG.

gcsfs looks a raw token's expiry up at Google's ``tokeninfo?access_token=<token>``; the tests send that
lookup to a dead proxy on 127.0.0.1 (nothing leaves the machine) so it fails the way it fails offline.
"""
from __future__ import annotations

import contextlib
import io
import logging
import secrets
import socket
import traceback

import pytest

from fluxfs import FluxFileSystem
from fluxfs.cli import main
from fluxfs.gcs.redact import redact, scrub

TOKEN = "ya29.a0Af" + secrets.token_urlsafe(24)


def _texts_of(exc: BaseException) -> list[str]:
    out = []
    while exc is not None:
        out += [str(exc), repr(exc), "".join(traceback.format_exception(exc))]
        exc = exc.__cause__ or exc.__context__
    return out


@pytest.fixture
def debug_logs(caplog):
    """Every logger at DEBUG for the test (caplog sees what any handler would)."""
    caplog.set_level(logging.DEBUG)
    names = set(logging.root.manager.loggerDict) | {"urllib3", "urllib3.connectionpool", "gcsfs", "requests", ""}
    saved = {n: logging.getLogger(n).level for n in names}
    for n in names:
        logging.getLogger(n).setLevel(logging.DEBUG)
    yield caplog
    for n, level in saved.items():
        logging.getLogger(n).setLevel(level)


@pytest.fixture
def dead_proxy(monkeypatch):
    """HTTPS requests go to a closed port on 127.0.0.1: the tokeninfo lookup fails at once, offline."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    for name in ("HTTPS_PROXY", "https_proxy"):
        monkeypatch.setenv(name, f"http://127.0.0.1:{port}")
    for name in ("NO_PROXY", "no_proxy", "FETCH_RAW_TOKEN_EXPIRY"):
        monkeypatch.delenv(name, raising=False)


def test_failed_token_lookup_names_no_token(flux_server, dead_proxy, debug_logs):
    with pytest.raises(Exception) as failed:
        FluxFileSystem(endpoint_url=flux_server.url, token=TOKEN, skip_instance_cache=True)
    texts = _texts_of(failed.value)
    assert any("tokeninfo?access_token=[REDACTED]" in t for t in texts), texts[0]
    for text in texts + [debug_logs.text]:
        assert TOKEN not in text and TOKEN[5:] not in text


def test_cli_ls_with_raw_token_names_no_token(flux_server, bucket, dead_proxy):
    for debug in ([], ["--debug"]):
        err = io.StringIO()
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            code = main([*debug, "--endpoint", flux_server.url, "-o", f"token={TOKEN}", "ls", f"flux://{bucket}/"])
        assert code != 0
        assert TOKEN[5:] not in err.getvalue(), err.getvalue()
        assert "tokeninfo?access_token=[REDACTED]" in err.getvalue()


def test_failing_list_read_write_with_raw_token(flux_server, bucket, monkeypatch, debug_logs):
    """The token is sent (and refused: the server wants another) on listing, read and write; nothing shows it."""
    monkeypatch.setenv("FETCH_RAW_TOKEN_EXPIRY", "false")  # no lookup: the raw token is used as it is
    flux_server.configure(require_token="the-right-one")
    fs = FluxFileSystem(endpoint_url=flux_server.url, token=TOKEN, skip_instance_cache=True,
                        retry={"max_attempts": 2, "initial": 0.001})
    seen = []
    for call in (lambda: fs.find(f"{bucket}/p/"), lambda: fs.cat_file(f"{bucket}/x"),
                 lambda: fs.pipe_file(f"{bucket}/y", b"data"),
                 lambda: fs.cat_objects([{"name": f"{bucket}/a", "size": 1}, {"name": f"{bucket}/b", "size": 1}])):
        with pytest.raises(OSError) as failed:
            call()
        seen += _texts_of(failed.value)
    assert any("401" in t or "Permission" in t or "token" in t for t in seen)
    for text in seen + [debug_logs.text]:
        assert TOKEN[5:] not in text


def test_redact_shapes():
    assert redact("GET /tokeninfo?access_token=ya29.abc&x=1") == "GET /tokeninfo?access_token=[REDACTED]&x=1"
    assert redact("Authorization: Bearer abc.def-ghi") == "Authorization: Bearer [REDACTED]"
    assert redact("missing or wrong bearer token (HTTP 401)") == "missing or wrong bearer token (HTTP 401)"
    assert redact('{"refresh_token": "1//0gAbc", "client_secret": "s"}') == \
        '{"refresh_token": "[REDACTED]", "client_secret": "[REDACTED]"}'
    assert redact("token ya29.c.Zm9v expired") == "token ya29.[REDACTED] expired"
    assert redact("-o token=..., or B/key=1") == "-o token=..., or B/key=1"  # what is no secret stays
    try:
        try:
            raise ValueError(f"lookup at tokeninfo?access_token={TOKEN} failed")
        except ValueError as inner:
            raise RuntimeError("outer") from inner
    except RuntimeError as exc:
        assert TOKEN[5:] not in "".join(_texts_of(scrub(exc)))

"""Bad-input catalogue: the server is gone or the endpoint is wrong (docs/bad-inputs.md).

A refused connection or a name that does not resolve fails within about two seconds with one
`ServerUnreachable` line (a ConnectionError) naming the endpoint, the object and how to set the
endpoint, instead of 10-35 s of retries ending in a 70-90-line aiohttp traceback.
"""
from __future__ import annotations

import contextlib
import io
import logging
import socket
import time

import fsspec
import pytest

from fluxfs import FluxFileSystem
from fluxfs.cli import main
from fluxfs.errors import ServerUnreachable

FAST = 3.0  # seconds: ~1.5 s of connection retries plus slack for a busy machine


@pytest.fixture
def dead_endpoint() -> str:
    """An address where nothing listens: every connection is refused."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def _offline() -> bool:
    try:
        socket.getaddrinfo("storage.googleapis.com", 443)
    except OSError:
        return True
    return False


def assert_one_clear_line(exc: BaseException, *needles: str) -> None:
    text = str(exc)
    assert isinstance(exc, ServerUnreachable) and isinstance(exc, ConnectionError), repr(exc)
    assert "\n" not in text
    for n in needles:
        assert n in text, (n, text)
    assert "STORAGE_EMULATOR_HOST" in text and "endpoint_url" in text and "fluxfs serve" in text
    assert exc.__cause__ is None and exc.__suppress_context__  # no aiohttp chain to scroll through


def _write(fs, path):
    with fs.open(path, "wb") as f:
        f.write(b"x" * 10)


OPERATIONS = {
    "open-read": lambda fs, path: fs.open(path, "rb").read(),
    "write": _write,
    "find": lambda fs, path: fs.find(path.split("/")[0]),
    "info": lambda fs, path: fs.info(path),   # gcsfs's own request path
    "rm": lambda fs, path: fs.rm(path),
}


@pytest.mark.parametrize("op", sorted(OPERATIONS))
def test_connection_refused_fails_fast_naming_the_endpoint(dead_endpoint, op, caplog):
    fs = FluxFileSystem(endpoint_url=dead_endpoint, token="anon", skip_instance_cache=True)
    start = time.monotonic()
    with pytest.raises(ServerUnreachable) as info:
        OPERATIONS[op](fs, "bkt/x")
    assert time.monotonic() - start < FAST
    assert_one_clear_line(info.value, f"cannot reach the storage server at {dead_endpoint}", "connect")
    # Nor does gcsfs print the same error again with a 20-line traceback (its logger.exception).
    assert [r.getMessage() for r in caplog.records if r.name == "gcsfs" and r.levelno >= logging.WARNING] == []


def test_fsspec_open_with_refused_endpoint_names_the_object(dead_endpoint, monkeypatch):
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", dead_endpoint.removeprefix("http://"))
    start = time.monotonic()
    with pytest.raises(ConnectionError) as info:
        with fsspec.open("flux://bkt/x", token="anon", skip_instance_cache=True).open() as f:
            f.read()
    assert time.monotonic() - start < FAST
    assert_one_clear_line(info.value, "bkt/x: ", dead_endpoint)


@pytest.mark.skipif(not _offline(), reason="needs a machine without network")
def test_no_network_and_no_emulator_fails_fast(monkeypatch):
    monkeypatch.delenv("STORAGE_EMULATOR_HOST", raising=False)
    start = time.monotonic()
    with pytest.raises(ServerUnreachable) as info:
        with fsspec.open("flux://bkt/x", token="anon", skip_instance_cache=True).open() as f:
            f.read()
    assert time.monotonic() - start < FAST
    assert_one_clear_line(info.value, "bkt/x: ", "cannot resolve storage.googleapis.com", "no network?")


@pytest.mark.skipif(not _offline(), reason="needs a machine without network")
def test_cli_without_emulator_or_network_fails_fast(monkeypatch):
    # No token either: gcsfs's credential lookup alone retried the metadata server for ~30 s.
    monkeypatch.delenv("STORAGE_EMULATOR_HOST", raising=False)
    err = io.StringIO()
    start = time.monotonic()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = main(["ls", "flux://bkt/"])
    assert time.monotonic() - start < FAST
    assert code == 1
    lines = err.getvalue().splitlines()
    assert len(lines) == 1 and "Traceback" not in err.getvalue(), err.getvalue()
    assert lines[0].startswith("fluxfs ls: cannot reach the storage server at https://storage.googleapis.com: "
                               "cannot resolve storage.googleapis.com")
    assert "STORAGE_EMULATOR_HOST" in lines[0] and "fluxfs serve" in lines[0]


def test_datasets_and_checkpoints_fail_fast_too(dead_endpoint):
    import torch

    from fluxfs.pipes import FluxCheckpoint, FluxIterableDataset

    for what, call in [
        ("bkt/p/", lambda: list(FluxIterableDataset.from_prefix("flux://bkt/p/", endpoint_url=dead_endpoint,
                                                                token="anon"))),
        ("bkt/m.pt", lambda: FluxCheckpoint(endpoint_url=dead_endpoint, token="anon").save({"w": torch.zeros(3)},
                                                                                           "flux://bkt/m.pt")),
    ]:
        start = time.monotonic()
        with pytest.raises(ServerUnreachable) as info:
            call()
        assert time.monotonic() - start < FAST, what
        assert_one_clear_line(info.value, f"{what}: cannot reach the storage server at {dead_endpoint}")


def test_a_hanging_name_lookup_neither_stalls_the_filesystem_nor_the_exit():
    # A DNS server that never answers: the lookup before gcsfs's credential chain is let through after its
    # timeout, and the process then ends at once (a pool's worker still in getaddrinfo was joined at exit).
    import subprocess
    import sys

    code = ("import socket, threading, time\n"
            "socket.getaddrinfo = lambda *a, **k: threading.Event().wait(120)\n"
            "from fluxfs.gcs import reach\n"
            "start = time.monotonic()\n"
            "reach.check_resolvable('https://storage.googleapis.com', timeout=0.5)\n"
            "print(round(time.monotonic() - start, 1), flush=True)\n")
    start = time.monotonic()
    try:
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"the process did not end after its lookup was let through: {exc.stdout!r}")
    assert out.returncode == 0, out.stderr
    assert float(out.stdout) < 0.5 + FAST
    assert time.monotonic() - start < 20  # importing fluxfs and starting Python, on a busy machine

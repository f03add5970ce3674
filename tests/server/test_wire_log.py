"""What the server logs for bytes that are not an HTTP request: one line naming the reason, no traceback."""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys

from tests.conftest import reap

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# The first bytes of a TLS 1.2 ClientHello: what `curl https://127.0.0.1:PORT` sends.
_CLIENT_HELLO = bytes.fromhex("16030100a5010000a10303") + bytes(32) + b"\x00\x00\x02\x13\x01\x01\x00"


def _send(port: int, payload: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(payload)
        return s.recv(4096)


def test_bad_bytes_logged_as_one_line_with_reason():
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.Popen([sys.executable, "-m", "fluxfs.server", "--port", "0"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=env)
    try:
        port = int(proc.stdout.readline().decode().strip().rsplit(":", 1)[1])
        assert _send(port, _CLIENT_HELLO).startswith(b"HTTP/1.0 400")
        assert _send(port, b"GET / HTTP/1.1\r\nHost: x\r\nBad Header\r\n\r\n").startswith(b"HTTP/1.0 400")
        assert _send(port, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").startswith(b"HTTP/1.1")  # still serving
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=15) == 0
        err = proc.stderr.read().decode()
    finally:
        reap(proc)
    lines = [ln for ln in err.splitlines() if "127.0.0.1" in ln and "refused a request" in ln]
    assert "Traceback" not in err, err
    assert len(lines) == 2, err
    assert "TLS (https://) handshake sent to this plain HTTP server" in lines[0]
    assert "malformed HTTP request: Invalid header token: b'Bad Header'" in lines[1]
    assert "for this machine only (loopback)" in err  # the banner still says who it is for


def test_a_client_going_away_mid_request_is_no_error():
    """Uploads cut off (their client killed, or Ctrl-C) log nothing: before, each was an ERROR "refused a request"
    with a traceback."""
    from fluxfs.server.handle import ServerHandle

    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.Popen([sys.executable, "-m", "fluxfs.server", "--port", "0"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=env)
    try:
        url = proc.stdout.readline().decode().strip().rsplit(" ", 1)[-1]
        port = int(url.rsplit(":", 1)[1])
        ServerHandle(url).create_bucket("gone")
        host = f"Host: 127.0.0.1:{port}\r\n".encode()
        for head in (b"PUT /gone/obj HTTP/1.1\r\n" + host + b"Content-Length: 10000000\r\n\r\n",
                     b"POST /upload/storage/v1/b/gone/o?uploadType=media&name=o2 HTTP/1.1\r\n" + host +
                     b"Content-Length: 10000000\r\n\r\n"):
            for reset in (False, True):  # closed, or reset (RST)
                s = socket.create_connection(("127.0.0.1", port), timeout=10)
                s.sendall(head + b"z" * 100_000)
                if reset:
                    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
                s.close()
        assert _send(port, b"PUT /gone/small HTTP/1.1\r\n" + host + b"Content-Length: 2\r\n\r\nok").startswith(
            b"HTTP/1.1 200")  # still serving
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=15) == 0
        err = proc.stderr.read().decode()
    finally:
        reap(proc)
    assert "refused a request" not in err and "Traceback" not in err and "ERROR" not in err, err

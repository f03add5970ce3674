"""What the server logs for bytes that are not an HTTP request: one line naming the reason, no traceback."""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys

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
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdout.close()
        proc.stderr.close()
    lines = [ln for ln in err.splitlines() if "127.0.0.1" in ln and "refused a request" in ln]
    assert "Traceback" not in err, err
    assert len(lines) == 2, err
    assert "TLS (https://) handshake sent to this plain HTTP server" in lines[0]
    assert "malformed HTTP request: Invalid header token: b'Bad Header'" in lines[1]
    assert "for this machine only (loopback)" in err  # the banner still says who it is for

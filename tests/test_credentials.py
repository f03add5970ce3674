"""Credentials flow exactly as gcsfs's, on every request path fluxfs adds, and no token is ever logged.

The fluxfs server is told to require one bearer token (`configure(require_token=...)`), so a
request succeeds only if it carries ``Authorization: Bearer <token>``. Credentials that need a
refresh (ADC files, service-account keys) get their access token from a small OAuth2 token
endpoint on 127.0.0.1, named as ``token_uri`` in the credential file: nothing leaves the machine.
"""
from __future__ import annotations

import json
import logging
import os
import secrets
import threading
from types import SimpleNamespace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from fluxfs import FluxFileSystem
from fluxfs.gcs import lean_get

PART = 5 * 2**20


@pytest.fixture
def planted():
    """A fresh access token, long and unique enough that finding it anywhere means it leaked."""
    return "ya29.fluxfs-test-" + secrets.token_urlsafe(24)


@pytest.fixture
def token_server(planted):
    """An OAuth2 token endpoint on loopback answering every grant with the planted access token."""
    calls: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):  # http.server's naming
            body = self.rfile.read(int(self.headers.get("Content-Length", 0))).decode()
            calls.append(body.split("grant_type=", 1)[-1].split("&", 1)[0])
            reply = json.dumps({"access_token": planted, "expires_in": 3600, "token_type": "Bearer"}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(reply)))
            self.end_headers()
            self.wfile.write(reply)

        def log_message(self, *args):  # keep the test output clean
            pass

    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    srv.calls = calls
    srv.url = f"http://127.0.0.1:{srv.server_address[1]}/token"
    yield srv
    srv.shutdown()
    srv.server_close()


@pytest.fixture
def no_google(monkeypatch):
    """Keep every credential path on this machine: no GCE metadata probe, no tokeninfo lookup."""
    monkeypatch.setenv("NO_GCE_CHECK", "true")
    monkeypatch.setenv("FETCH_RAW_TOKEN_EXPIRY", "false")
    monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", "fluxfs-test")
    monkeypatch.delenv("GOOGLE_APPLICATION_CREDENTIALS", raising=False)
    monkeypatch.delenv("STORAGE_EMULATOR_HOST", raising=False)


def _fs(server, token, **options) -> FluxFileSystem:
    return FluxFileSystem(endpoint_url=server.url, token=token, skip_instance_cache=True, **options)


def exercise(fs: FluxFileSystem, bucket: str) -> None:
    """One request of every kind fluxfs makes; each must be signed, or the server answers 401."""
    small = {f"{bucket}/auth/{i:03d}": secrets.token_bytes(100 + i) for i in range(40)}
    fs.pipe(small)                                                    # single-request uploads
    infos = list(fs.find(f"{bucket}/auth", detail=True).values())     # parallel lister
    assert len(infos) == 40
    got = fs.cat_objects(infos)                                       # compose + GET + DELETE
    assert {k: got[k] for k in small} == small
    big = secrets.token_bytes(PART + 1234)
    with fs.open(f"{bucket}/auth-big", "wb") as f:                    # XML multipart upload
        f.write(big)
    with fs.open(f"{bucket}/auth-big", "rb") as f:                    # parallel ranged reads
        assert f.read() == big
    buf = bytearray(len(big))
    fs.read_into(f"{bucket}/auth-big", [(0, buf)], range_size=2**20)   # the lean GET (gcs/lean_get.py): a 401
    assert buf == big and lean_get._POOLS[fs._session].idle           # would have gone to aiohttp, keeping none
    assert fs.ls(bucket, detail=False)                                # gcsfs's own request path
    fs.rm(f"{bucket}/auth-big")


def assert_not_logged(caplog, planted: str) -> None:
    logged = caplog.text + "".join(str(r.args) for r in caplog.records)
    assert planted not in logged
    assert "Bearer ya29" not in logged


@pytest.fixture
def debug_logs(caplog):
    caplog.set_level(logging.DEBUG)  # every logger, every level: what a user with DEBUG logging would see
    return caplog


def test_credentials_object(flux_server, bucket, planted, no_google, debug_logs):
    from google.oauth2.credentials import Credentials

    flux_server.configure(require_token=planted)
    exercise(_fs(flux_server, Credentials(token=planted), part_size=PART), bucket)
    assert_not_logged(debug_logs, planted)


def test_without_or_with_a_wrong_token_permission_is_denied(flux_server, bucket, planted, no_google, debug_logs):
    from google.oauth2.credentials import Credentials

    flux_server.configure(require_token=planted)
    for token in ("anon", Credentials(token="ya29.wrong-" + secrets.token_hex(8))):
        fs = _fs(flux_server, token)
        with pytest.raises(PermissionError) as e1:
            fs.cat_objects([{"name": f"{bucket}/x", "size": 1, "generation": "1", "crc32c": "AAAAAA=="}])
        with pytest.raises(PermissionError) as e2:
            fs.pipe(f"{bucket}/x", b"data")
        with pytest.raises(PermissionError) as e3:
            fs.find(bucket)
        for e in (e1, e2, e3):
            assert bucket in str(e.value) and planted not in str(e.value)
    assert_not_logged(debug_logs, planted)


def test_raw_access_token_string(flux_server, bucket, planted, no_google, debug_logs):
    flux_server.configure(require_token=planted)
    exercise(_fs(flux_server, planted, part_size=PART), bucket)
    assert_not_logged(debug_logs, planted)


@pytest.fixture
def key_file(tmp_path, token_server):
    """A service-account key (fresh RSA key) whose token_uri is the loopback token endpoint."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                            serialization.NoEncryption()).decode()
    path = tmp_path / "sa.json"
    path.write_text(json.dumps({
        "type": "service_account", "project_id": "fluxfs-test", "private_key_id": secrets.token_hex(8),
        "private_key": pem, "client_email": "trainer@fluxfs-test.iam.gserviceaccount.com",
        "client_id": "1234567890", "token_uri": token_server.url,
    }))
    return SimpleNamespace(path=str(path), pem_line=pem.splitlines()[1])


def assert_refreshes_locally(fs: FluxFileSystem, token_server) -> None:
    """Before any request: the credentials gcsfs picked will refresh against the loopback endpoint only."""
    creds = fs.credentials.credentials
    assert getattr(creds, "_token_uri", None) == token_server.url, type(creds)


JWT_GRANT = "urn%3Aietf%3Aparams%3Aoauth%3Agrant-type%3Ajwt-bearer"


def test_service_account_key_file(flux_server, bucket, planted, token_server, key_file, no_google, debug_logs):
    flux_server.configure(require_token=planted)
    fs = _fs(flux_server, key_file.path, part_size=PART)  # token="/path/key.json", as gcsfs takes it
    assert_refreshes_locally(fs, token_server)
    exercise(fs, bucket)
    assert token_server.calls == [JWT_GRANT]  # one refresh, then the token is reused
    assert_not_logged(debug_logs, planted)
    assert key_file.pem_line not in debug_logs.text


def test_application_default_credentials(flux_server, bucket, planted, token_server, key_file, no_google,
                                         debug_logs, monkeypatch):
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", key_file.path)
    flux_server.configure(require_token=planted)
    fs = _fs(flux_server, None, part_size=PART)  # token=None: gcsfs's default chain, ADC first
    assert fs.credentials.method == "google_default"
    assert_refreshes_locally(fs, token_server)
    exercise(fs, bucket)
    assert token_server.calls == [JWT_GRANT]
    assert_not_logged(debug_logs, planted)


def test_cli_debug_output_never_shows_the_token(flux_server, bucket, planted, no_google, capfd):
    from fluxfs.cli import main

    flux_server.configure(require_token=planted)
    assert main(["--debug", "--endpoint", flux_server.url, "-o", f"token={planted}", "ls", f"flux://{bucket}"]) == 0
    assert main(["--debug", "--endpoint", flux_server.url, "ls", f"flux://{bucket}"]) == 4
    out, err = capfd.readouterr()
    assert planted not in out + err
    assert os.environ.get("FETCH_RAW_TOKEN_EXPIRY") == "false"

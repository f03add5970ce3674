"""The lean ranged GET (gcs/lean_get.py): bodies received straight into the caller's buffers, and every answer
it does not handle (200, chunked, gzip, errors, a proxy) left to aiohttp, parsed exactly as before. (A body whose
crc32c is not the object's is refused: tests/reads/test_into.py, whose reads go this way.)"""
from __future__ import annotations

import asyncio
import base64
import gc
import gzip
import os
import ssl
import threading
from pathlib import Path

import aiohttp
import psutil
import pytest
from aiohttp import web

from fluxfs.errors import RequestTimeout, ServerUnreachable
from fluxfs.gcs import bridge, lean_get
from fluxfs.gcs.checksums import crc32c
from fluxfs.reads import into
from tests.conftest import make_fs, wait_for

MiB = 2**20
DATA = os.urandom(3 * MiB + 12345)
QUICK = {"max_attempts": 2, "initial": 0.01, "maximum": 0.02}


def idle(fs) -> int:
    """Kept-alive lean connections of the filesystem's session."""
    pool = lean_get._POOLS.get(fs._session) if fs._session is not None else None
    return len(pool.idle) if pool is not None else 0


def open_connections(port: int) -> set:
    """This process's open connections to `port` (their local ports)."""
    return {c.laddr.port for c in psutil.Process().net_connections("tcp")
            if c.raddr and c.raddr.port == port and c.status == psutil.CONN_ESTABLISHED}


@pytest.mark.parametrize("server", ["flux_server", "fake_gcs"])
def test_many_ranges_and_gaps_land_exactly(request, server):
    srv = request.getfixturevalue(server)
    bucket = f"lean{os.urandom(4).hex()}"
    srv.create_bucket(bucket)
    fs = make_fs(srv)
    fs.pipe_file(f"{bucket}/o", DATA)
    buf = bytearray(len(DATA))
    got = fs.read_into(f"{bucket}/o", [(0, buf)], range_size=256 * 1024)
    assert buf == DATA and got.verified and got.requests == 13
    assert idle(fs) >= 1   # the lean path's connections, kept alive
    cuts = [(10, 100), (5000, 7000), (MiB + 3, 2 * MiB), (3 * MiB, len(DATA))]
    bufs = [bytearray(b - a) for a, b in cuts]
    before = fs.stats()["requests"]["read"]
    fs.read_into(f"{bucket}/o", [(a, b) for (a, _), b in zip(cuts, bufs)], range_size=MiB, max_gap=4096)
    assert [bytes(b) for b in bufs] == [DATA[a:b] for a, b in cuts]
    assert fs.stats()["requests"]["read"] - before == 4   # counted as aiohttp's requests are


def test_resets_mid_body_are_retried_and_exact(flux_server, stored):
    fs, path = stored
    fs.read_into(path, [(0, bytearray(10))])
    flux_server.configure(reset_rate=0.3, fail_ops="read", seed=5)
    buf = bytearray(len(DATA))
    assert fs.read_into(path, [(0, buf)], range_size=128 * 1024).verified
    assert buf == DATA


def test_a_stalled_answer_times_out_within_the_bound(flux_server, bucket):
    fs = make_fs(flux_server, read_timeout=1, retry=QUICK)
    fs.pipe_file(f"{bucket}/big", DATA)
    fs.read_into(f"{bucket}/big", [(0, bytearray(10))])
    assert idle(fs) == 1
    flux_server.configure(stall_after=MiB, fail_ops={"read"})   # cleared after the test (tests/conftest.py)
    with pytest.raises(RequestTimeout, match=f"{bucket}/big: timed out: the answer stalled for 1 s"):
        fs.read_into(f"{bucket}/big", [(0, bytearray(2 * MiB))])


def test_a_cancelled_read_leaves_no_connection_open(flux_server, bucket):
    fs = make_fs(flux_server)
    fs.pipe_file(f"{bucket}/big", DATA)
    port = int(flux_server.url.rsplit(":", 1)[1])
    before = open_connections(port)   # aiohttp's, kept alive since the upload
    flux_server.configure(stall_after=MiB, fail_ops={"read"})

    async def cancelled():
        task = asyncio.ensure_future(into.read_into(fs.client, bucket, "big", [(0, bytearray(2 * MiB))]))
        while not open_connections(port) - before:
            await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    bridge.run(fs, cancelled)
    wait_for(lambda: not open_connections(port) - before, "the cancelled read's connection closed")
    assert idle(fs) == 0


def test_the_connections_go_with_the_filesystem(flux_server, bucket):
    fs = make_fs(flux_server)
    fs.pipe_file(f"{bucket}/o", DATA)
    port = int(flux_server.url.rsplit(":", 1)[1])
    before = open_connections(port)
    fs.read_into(f"{bucket}/o", [(0, bytearray(len(DATA)))], range_size=MiB)
    lean = open_connections(port) - before
    assert lean and idle(fs) == len(lean)
    loop = fs.loop
    del fs   # gcsfs closes the session of a filesystem let go; the lean pool goes with the session

    def closed() -> bool:
        asyncio.run_coroutine_threadsafe(asyncio.sleep(0), loop).result()  # gcsfs's close waits for the loop
        gc.collect()
        return not lean & open_connections(port)
    wait_for(closed, "the lean connections closed", timeout=10)   # not the server's idle timeout


def test_a_forked_child_reads_on_connections_of_its_own(stored):
    fs, path = stored
    fs.read_into(path, [(0, bytearray(10))])
    assert idle(fs) == 1
    parents = lean_get._POOLS[fs._session]
    pid = os.fork()
    if pid == 0:  # a DataLoader worker: the parent's connections forgotten, reads on its own
        ok = False
        try:
            buf = bytearray(len(DATA))
            ok = not parents.idle and fs.read_into(path, [(0, buf)]).verified and buf == DATA and idle(fs) == 1
        finally:
            os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)
    assert os.WEXITSTATUS(status) == 0
    buf = bytearray(100)
    fs.read_into(path, [(5, buf)])
    assert buf == DATA[5:105]


def test_a_proxy_is_left_to_aiohttp(flux_server, stored, monkeypatch):
    fs, path = stored
    proxied = make_fs(flux_server, session_kwargs={"trust_env": True})
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")   # nothing listens: were it used, the read would fail
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    buf = bytearray(len(DATA))
    proxied.read_into(path, [(0, buf)])
    assert buf == DATA and idle(proxied) == 0
    fs.read_into(path, [(0, buf)])
    assert idle(fs) == 1    # without trust_env, aiohttp ignores the environment: so does the lean path
    through = make_fs(flux_server, session_kwargs={"proxy": "http://127.0.0.1:9"}, connect_timeout=0.2, retry=QUICK)
    with pytest.raises(ServerUnreachable, match=r"'127.0.0.1', 9\)"):   # the proxy was asked, as aiohttp does
        through.read_into(path, [(0, buf)])
    assert idle(through) == 0


class Scripted:
    """A server on 127.0.0.1 that answers an object's ranged GETs the way `mode` says."""

    def __init__(self, tls: "ssl.SSLContext | None" = None) -> None:
        self.mode, self.seen, self.tls = "206", [], tls
        self.loop = asyncio.new_event_loop()
        started = threading.Event()
        threading.Thread(target=self._serve, args=(started,), daemon=True).start()
        started.wait(10)

    def _serve(self, started: threading.Event) -> None:
        asyncio.set_event_loop(self.loop)
        app = web.Application()
        app.router.add_get("/download/storage/v1/b/{bucket}/o/{key}", self.get)
        self.runner = web.AppRunner(app)
        self.loop.run_until_complete(self.runner.setup())
        site = web.TCPSite(self.runner, "127.0.0.1", 0, ssl_context=self.tls)
        self.loop.run_until_complete(site.start())
        self.url = f"{'https' if self.tls else 'http'}://127.0.0.1:{self.runner.addresses[0][1]}"
        started.set()
        self.loop.run_forever()

    def close(self) -> None:
        asyncio.run_coroutine_threadsafe(self.runner.cleanup(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)

    async def get(self, request: web.Request) -> web.StreamResponse:
        self.seen.append(dict(request.headers))
        a, b = (int(x) for x in request.headers["Range"].split("=")[1].split("-"))
        body = DATA[a:b + 1]
        goog = {"x-goog-generation": "7", "x-goog-hash": "crc32c=" + base64.b64encode(
            crc32c(DATA).to_bytes(4, "big")).decode()}
        ranged = {**goog, "Content-Range": f"bytes {a}-{b}/{len(DATA)}"}
        mode = self.mode
        if mode == "302" and "moved" not in request.query:
            raise web.HTTPFound(location=str(request.rel_url.update_query(moved="1")))
        if mode in ("404", "412", "503"):
            return web.json_response({"error": {"code": int(mode), "message": f"scripted {mode}"}}, status=int(mode))
        if mode == "200":
            return web.Response(body=DATA, headers=goog)
        if mode == "gzip":
            return web.Response(body=gzip.compress(body), status=206,
                                headers={**ranged, "Content-Encoding": "gzip"})
        if mode == "chunked":
            resp = web.StreamResponse(status=206, headers=ranged)
            resp.enable_chunked_encoding()
            await resp.prepare(request)
            for i in range(0, len(body), 65536):
                await resp.write(body[i:i + 65536])
            await resp.write_eof()
            return resp
        headers = {**ranged, "Connection": "close"} if mode == "close" else ranged
        return web.Response(body=body, status=206, headers=headers)


@pytest.fixture(scope="module")
def scripted():
    srv = Scripted()
    yield srv
    srv.close()


def read(fs, start: int, end: int):
    buf = bytearray(end - start)
    fs.read_into("b/o", [(start, buf)], range_size=MiB)
    return buf


def outcome(fs, start: int, end: int):
    try:
        return bytes(read(fs, start, end))
    except Exception as exc:  # compared between the two paths
        return type(exc), str(exc)


@pytest.mark.parametrize("mode", ["206", "close", "200", "302", "chunked", "gzip", "404", "412", "503"])
def test_every_answer_reads_as_through_aiohttp(scripted, monkeypatch, mode):
    fs = make_fs(scripted, retry=QUICK)
    scripted.mode = mode
    start, end = (0, 2 * MiB + 5) if mode == "200" else (1000, 2 * MiB + 5)
    lean = outcome(fs, start, end)
    assert (idle(fs) > 0) == (mode == "206")
    monkeypatch.setattr(lean_get, "usable", lambda session, url: False)
    assert outcome(make_fs(scripted, retry=QUICK), start, end) == lean
    if mode in ("206", "close", "302", "chunked", "gzip"):
        assert lean == DATA[start:end]
    ua = {h["User-Agent"] for h in scripted.seen}
    assert len(ua) == 1 and ua.pop().startswith("python-gcsfs/")
    scripted.seen.clear()


def test_a_kept_alive_connection_lost_before_the_answer_is_tried_again(flux_server, bucket):
    fs = make_fs(flux_server, retry={"max_attempts": 1})   # no retry but the lean path's own
    fs.pipe_file(f"{bucket}/o", DATA)
    fs.read_into(f"{bucket}/o", [(0, bytearray(10))])
    assert idle(fs) == 1
    flux_server.configure(lose_replies=1, fail_ops="read")
    before = fs.stats()["requests"]["read"]
    buf = bytearray(len(DATA))
    assert fs.read_into(f"{bucket}/o", [(0, buf)]).verified and buf == DATA
    assert fs.stats()["requests"]["read"] - before == 2 and idle(fs) == 1


def self_signed(tmp: Path) -> tuple[ssl.SSLContext, ssl.SSLContext]:
    """(server context, client context trusting it) for a certificate of 127.0.0.1 made here."""
    import datetime
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(hours=1))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), True)
            .sign(key, hashes.SHA256()))
    pem = cert.public_bytes(serialization.Encoding.PEM)
    (tmp / "cert.pem").write_bytes(pem)
    (tmp / "key.pem").write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                    serialization.NoEncryption()))
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.load_cert_chain(tmp / "cert.pem", tmp / "key.pem")
    return server, ssl.create_default_context(cadata=pem.decode())


@pytest.fixture(scope="module")
def tls_scripted(tmp_path_factory):
    server, client = self_signed(tmp_path_factory.mktemp("tls"))
    srv = Scripted(server)
    srv.client_ssl = client
    yield srv
    srv.close()


def tls_fs(srv, client_ssl):
    """A filesystem whose session's connector trusts `client_ssl` (a connector is made on the loop it serves)."""
    fs = make_fs(srv, retry=QUICK)

    async def trust():
        fs.session_kwargs["connector"] = aiohttp.TCPConnector(ssl=client_ssl)
    bridge.run(fs, trust)
    return fs


@pytest.mark.parametrize("mode", ["206", "close", "chunked", "404"])
def test_over_tls_too(tls_scripted, monkeypatch, mode):
    fs = tls_fs(tls_scripted, tls_scripted.client_ssl)
    tls_scripted.mode = mode
    lean = outcome(fs, 1000, 2 * MiB + 5)
    lean_again = outcome(fs, 5, 3 * MiB)
    assert (idle(fs) > 0) == (mode == "206")
    monkeypatch.setattr(lean_get, "usable", lambda session, url: False)
    plain = tls_fs(tls_scripted, tls_scripted.client_ssl)
    assert (outcome(plain, 1000, 2 * MiB + 5), outcome(plain, 5, 3 * MiB)) == (lean, lean_again)
    if mode != "404":
        assert (lean, lean_again) == (DATA[1000:2 * MiB + 5], DATA[5:3 * MiB])


def test_a_certificate_not_trusted_is_refused_as_before(tls_scripted, monkeypatch):
    fs = make_fs(tls_scripted, retry=QUICK)    # aiohttp's default context: the test's certificate is unknown
    lean = outcome(fs, 0, 100)
    assert isinstance(lean, tuple) and idle(fs) == 0
    monkeypatch.setattr(lean_get, "usable", lambda session, url: False)
    assert outcome(make_fs(tls_scripted, retry=QUICK), 0, 100) == lean

"""HTTP and gRPC on the embedded server's one port and one URL: the first bytes of a connection decide (the HTTP/2
preface is gRPC, anything else is HTTP as before), a gRPC client over TLS is refused at once, the private gRPC
socket is removed when the server stops."""
from __future__ import annotations

import logging
import os
import socket
import time

import grpc
import pytest
from google.api_core import exceptions

from fluxfs.server import run
from tests.server import raw
from tests.zonal.server.grpcutil import arun, endpoint, make_bucket, storage


def _get_object(url, bucket, name):
    async def go():
        async with storage(url) as client:
            return await client.get_object(bucket, name, retry=None)
    return arun(go())


def test_http_and_grpc_answer_on_the_one_url_of_a_served_subprocess():
    with run(in_process=False) as h:  # `python -m fluxfs.server`, as `fluxfs serve`: its one URL on stdout
        b = make_bucket(h.url)
        assert raw.upload(h.url, b, "k", b"one port").status == 200
        obj = _get_object(h.url, b, "k")
        assert (obj.name, obj.size) == ("k", 8)
        assert raw.request(h.url, "GET", raw.obj_path(b, "k"), params={"alt": "media"}).body == b"one port"
        with pytest.raises(exceptions.NotFound, match=f"No such object: {b}/missing"):
            _get_object(h.url, b, "missing")


def test_a_request_shorter_than_the_preface_is_answered_at_once(srv):
    host, port = endpoint(srv.url).split(":")
    with socket.create_connection((host, int(port)), timeout=5) as s:
        s.sendall(b"GET / HTTP/1.0\r\n\r\n")  # 18 bytes: decided at its first byte, not after 24
        t0 = time.monotonic()
        head = s.recv(100)
    assert head.startswith(b"HTTP/1.") and time.monotonic() - t0 < 2


def test_http_keeps_working_between_grpc_calls_on_the_same_port(srv):
    b = make_bucket(srv.url)
    for i in range(3):
        assert raw.upload(srv.url, b, f"k{i}", b"x" * i).status == 200
        assert _get_object(srv.url, b, f"k{i}").size == i
        assert raw.request(srv.url, "GET", raw.obj_path(b, f"k{i}")).json()["size"] == str(i)


def test_grpc_over_tls_is_refused_at_once_and_said_once(caplog):
    async def call():
        async with grpc.aio.secure_channel(endpoint(srv.url), grpc.ssl_channel_credentials()) as ch:
            method = ch.unary_unary("/google.storage.v2.Storage/GetObject")
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await method(b"", timeout=10)
            return err.value.code()

    caplog.set_level(logging.WARNING, logger="fluxfs.server")
    with run() as srv:  # a server that has not said it yet
        t0 = time.monotonic()
        assert arun(call()) == grpc.StatusCode.UNAVAILABLE
        assert arun(call()) == grpc.StatusCode.UNAVAILABLE
        assert time.monotonic() - t0 < 5
        said = [r.getMessage() for r in caplog.records if "refused a TLS gRPC connection" in r.getMessage()]
        assert len(said) == 1 and "speaks gRPC in plaintext only" in said[0]
        assert raw.request(srv.url, "GET", "/storage/v1/b/nope").status == 404  # HTTP unaffected


def test_private_grpc_socket_is_removed_when_the_server_stops():
    with run() as h:
        b = make_bucket(h.url)
        assert raw.upload(h.url, b, "k", b"x").status == 200
        assert h.listening.grpc._dir is None  # no gRPC yet: nothing made
        _get_object(h.url, b, "k")
        private = h.listening.grpc._dir
        assert os.path.exists(os.path.join(private, "grpc.sock"))
        assert os.stat(private).st_mode & 0o777 == 0o700
    assert not os.path.exists(private)

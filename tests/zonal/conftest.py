"""A zonal bucket served over gRPC as well as HTTP: the embedded server when it answers gRPC (`fluxfs.server.grpc`,
on the same port as HTTP), and Google's storage-testbench when `FLUXFS_TESTBENCH` names an installed checkout
(its `venv/` holding the testbench's dependencies), each run when available, else skipped saying why."""
from __future__ import annotations

import contextlib
import dataclasses
import importlib.util
import os
import signal
import socket
import subprocess
import time
import urllib.request
from typing import Any, Callable, Optional

import pytest

from fluxfs import FluxFileSystem
from tests.conftest import new_bucket_name


@dataclasses.dataclass
class ZonalServer:
    """Where a zonal bucket is: the HTTP URL, the gRPC host:port, and options a filesystem there needs."""

    http_url: str
    grpc_endpoint: str
    options: dict
    make_bucket: Callable[[], str]
    server: Optional[Any] = None  # the embedded server (stats), None on the testbench


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url: str, data: Optional[bytes] = None, timeout: float = 5.0) -> bytes:
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"} if data else {})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return r.read()


@contextlib.contextmanager
def _testbench(checkout: str):
    python = os.path.join(checkout, "venv", "bin", "python")
    if not os.path.exists(python):
        pytest.skip(f"FLUXFS_TESTBENCH={checkout} has no venv/bin/python (install the testbench there)")
    port, gport = _free_port(), _free_port()
    env = {**os.environ, "PATH": os.path.join(checkout, "venv", "bin") + os.pathsep + os.environ.get("PATH", "")}
    proc = subprocess.Popen([python, "testbench_run.py", "127.0.0.1", str(port), "10"], cwd=checkout, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 30
        while True:
            try:
                _get(f"{url}/start_grpc?port={gport}")
                break
            except OSError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    pytest.skip("the storage-testbench did not start")
                time.sleep(0.3)
        yield url, f"127.0.0.1:{gport}"
    finally:
        # testbench_run.py starts gunicorn (a master and a worker): the whole session it leads is stopped.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)


@pytest.fixture(scope="session")
def _testbench_server():
    checkout = os.environ.get("FLUXFS_TESTBENCH")
    if not checkout:
        pytest.skip("FLUXFS_TESTBENCH does not name a storage-testbench checkout")
    with _testbench(checkout) as (url, grpc):
        yield url, grpc


@pytest.fixture(params=["embedded", "testbench"])
def zonal_server(request) -> ZonalServer:
    """A server with zonal buckets over gRPC (each available one in turn)."""
    if request.param == "embedded":
        if importlib.util.find_spec("fluxfs.server.grpc") is None:
            pytest.skip("the embedded server answers no gRPC here (no fluxfs.server.grpc)")
        srv = request.getfixturevalue("flux_server")
        grpc = srv.url.split("://", 1)[1].rstrip("/")

        def make() -> str:
            name = new_bucket_name()
            FluxFileSystem(endpoint_url=srv.url, token="anon", skip_instance_cache=True).mkdir(
                name, placement="us-central1-a", location="us-central1")
            return name

        return ZonalServer(srv.url, grpc, {}, make, srv)
    url, grpc = request.getfixturevalue("_testbench_server")
    declared: dict = {}

    def make_tb() -> str:
        name = new_bucket_name()
        _get(f"{url}/storage/v1/b?project=test", data=f'{{"name": "{name}"}}'.encode())
        declared[name] = "zonal"  # the testbench's bucket resource does not say zonal
        return name

    return ZonalServer(url, grpc, {"bucket_types": declared}, make_tb)


@pytest.fixture
def zonal(zonal_server) -> tuple[ZonalServer, str]:
    """(server, a fresh zonal bucket on it)."""
    return zonal_server, zonal_server.make_bucket()


def zonal_fs(server: ZonalServer, **options: Any) -> FluxFileSystem:
    """A filesystem reading and writing `server`'s zonal buckets over gRPC."""
    opts = {"grpc_endpoint": server.grpc_endpoint, **server.options, **options}
    return FluxFileSystem(endpoint_url=server.http_url, token="anon", skip_instance_cache=True, **opts)

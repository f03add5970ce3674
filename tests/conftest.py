"""Shared fixtures: the fluxfs server and fake-gcs-server on 127.0.0.1, fresh buckets, filesystems.

`gcs_server` is parametrized over both servers; use it for behaviour both implement
correctly, and `flux_server` for the rest: fake-gcs-server ignores generation preconditions,
`fields` (partial responses) and the 1000-item page cap, repeats prefixes on every list page,
sets no componentCount on composites and has no XML multipart upload or moveTo.
"""
from __future__ import annotations

import contextlib
import signal
import subprocess
import time
import uuid

import pytest

from fluxfs import FluxFileSystem
from fluxfs.cli.testing import fake_gcs_server


# Left out of `make test-quick` (pytest -m "not slow"), kept in `make test`: whole files or single tests, by
# node-id prefix, that take seconds each (subprocesses, fresh venvs, gloo process groups, the notebook, the
# demo, stalls waited out). A file may instead say `pytestmark = pytest.mark.slow` or mark a test itself.
SLOW = (
    "tests/badinput/test_stalls.py",
    "tests/cli/test_demo.py",
    "tests/pipes/test_distributed.py",
    "tests/reads/test_stress.py",
    "tests/shards/test_distributed.py",
    "tests/shards/test_parts.py",
    "tests/test_notebook.py",
    "tests/test_packaging.py",
    "tests/test_without_torch.py",
    "tests/weights/test_group.py",
)


def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.nodeid.startswith(SLOW):
            item.add_marker(pytest.mark.slow)


def pytest_configure(config):
    # A job started in the background by a non-interactive shell (as CI may run us) inherits
    # SIGINT ignored, and then Python never raises KeyboardInterrupt: the Ctrl-C tests need the
    # interactive default that users have.
    if signal.getsignal(signal.SIGINT) in (signal.SIG_IGN, signal.SIG_DFL):
        signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture(scope="session")
def flux_server():
    """The embedded fluxfs server, in-process, local profile."""
    from fluxfs.server import run

    with run() as srv:
        yield srv


@pytest.fixture(autouse=True)
def _local_profile_after_test(request):
    """Whatever a test configured (faults, latency, deny_ops, tokens), the next test starts clean."""
    yield
    if "flux_server" in request.fixturenames:
        request.getfixturevalue("flux_server").configure(profile="local")


@pytest.fixture(scope="session")
def fake_gcs():
    """fake-gcs-server, the independent implementation, memory backend."""
    with fake_gcs_server() as srv:
        yield srv


@pytest.fixture(params=["fluxfs-server", "fake-gcs-server"])
def gcs_server(request):
    """Each test using this runs once against each server."""
    name = "flux_server" if request.param == "fluxfs-server" else "fake_gcs"
    return request.getfixturevalue(name)


def new_bucket_name() -> str:
    return f"t{uuid.uuid4().hex[:16]}"


@pytest.fixture
def bucket(flux_server) -> str:
    """A fresh, empty bucket on the fluxfs server."""
    name = new_bucket_name()
    flux_server.create_bucket(name)
    return name


@pytest.fixture
def any_bucket(gcs_server) -> str:
    """A fresh, empty bucket on whichever server `gcs_server` is."""
    name = new_bucket_name()
    gcs_server.create_bucket(name)
    return name


def make_fs(server, **options) -> FluxFileSystem:
    """A FluxFileSystem for `server`, not shared through fsspec's instance cache."""
    return FluxFileSystem(endpoint_url=server.url, token="anon", skip_instance_cache=True, **options)


def wait_for(check, what: str, timeout: float = 60.0, every: float = 0.01):
    """Poll `check()` until it returns something true and return that: a test waits for the event it needs
    (a file appearing, a server counter, a process state), never a fixed time. AssertionError naming `what`
    if it has not happened within `timeout` seconds (a bound for a loaded machine, not an expected time)."""
    deadline = time.monotonic() + timeout
    while True:
        got = check()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"waited {timeout:g} s for {what}")
        time.sleep(every)


@pytest.fixture
def fs(flux_server) -> FluxFileSystem:
    return make_fs(flux_server)


@pytest.fixture
def any_fs(gcs_server) -> FluxFileSystem:
    return make_fs(gcs_server)


@contextlib.contextmanager
def mounted_tmpfs(directory, size: str):
    """A tmpfs of `size` ("1m") mounted on the existing `directory`, a small disk to fill (needs root, as in
    CI's container); the test is skipped where mount is not allowed."""
    if subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(directory)],
                      capture_output=True).returncode:
        pytest.skip("cannot mount a tmpfs here (needs root)")
    try:
        yield directory
    finally:
        subprocess.run(["umount", "-l", str(directory)], check=False)


def edited(state: dict, **changes) -> dict:
    """A copy of a saved state with keys changed (`KeyError` as a value: that key removed), to forge one."""
    out = dict(state)
    for key, value in changes.items():
        if value is KeyError:
            del out[key]
        else:
            out[key] = value
    return out

"""Dataflux's dataflux_core (fast_list with worker processes, compose download) against both servers.

dataflux_core builds its own `storage.Client(project=...)`, which finds the server through
STORAGE_EMULATOR_HOST. We never pass `storage_client`: Dataflux would then probe
/iam/testPermissions, which emulators do not serve.
"""
from __future__ import annotations

import signal

import pytest
from dataflux_core import download, fast_list

from tests.conformance.wire import Wire


@pytest.fixture
def emulator_env(gcs_server, monkeypatch):
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", gcs_server.url)
    # dataflux_download installs a SIGINT handler that calls sys.exit(0); give pytest its own back.
    handler = signal.getsignal(signal.SIGINT)
    yield gcs_server
    signal.signal(signal.SIGINT, handler)


def fill(wire, bucket, n=60):
    objs = {f"data/{i:04d}.bin": bytes([i % 251]) * (i * 7 + 1) for i in range(n)}
    for k, v in objs.items():
        wire.put(bucket, k, v)
    wire.put(bucket, "other/skip", b"not listed")
    return objs


@pytest.fixture
def wire(gcs_server) -> Wire:
    return Wire(gcs_server.url)


def test_fast_list(emulator_env, wire, any_bucket):
    objs = fill(wire, any_bucket)
    listed = fast_list.ListingController(2, "test", any_bucket, sort_results=True, prefix="data/").run()
    assert listed == [(k, len(v)) for k, v in sorted(objs.items())]


def test_compose_download(emulator_env, wire, any_bucket):
    objs = fill(wire, any_bucket, n=40)
    items = sorted((k, len(v)) for k, v in objs.items())
    params = download.DataFluxDownloadOptimizationParams(max_composite_object_size=2000)
    got = download.dataflux_download("test", any_bucket, items, dataflux_download_optimization_params=params)
    assert got == [objs[k] for k, _ in items]
    # Dataflux deletes its temporary composites: only our objects remain.
    remaining, _ = wire.list_all(any_bucket)
    assert sorted(i["name"] for i in remaining) == sorted(list(objs) + ["other/skip"])

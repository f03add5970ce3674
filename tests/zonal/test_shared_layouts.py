"""Bucket layouts shared by every filesystem of a process on the same endpoint (each DataLoader worker's,
`skip_instance_cache=True` ones): a second filesystem asks nothing, another endpoint is asked, an answer is
trusted for `SHARED_TTL`, a bucket deleted or made through fluxfs is asked again, a forked child keeps them."""
from __future__ import annotations

import importlib
import os

import pytest

from fluxfs.server import run
from fluxfs.zonal import layout_sync
from tests.conftest import make_fs, new_bucket_name

layouts = importlib.import_module("fluxfs.zonal.layout")
ZONE = {"placement": "us-central1-a", "location": "us-central1"}


@pytest.fixture
def zonal_bucket(flux_server) -> str:
    name = new_bucket_name()
    make_fs(flux_server).mkdir(name, **ZONE)
    return name


def _lookups(server) -> int:
    return server.stats()["requests"].get("bucket", 0)


def test_a_second_filesystem_on_the_endpoint_asks_nothing(flux_server, zonal_bucket):
    flux_server.reset_stats()
    make_fs(flux_server).pipe_file(f"{zonal_bucket}/d/k", b"x")  # a write asks it (zonal writes go over gRPC)
    assert make_fs(flux_server).ls(zonal_bucket) == [f"{zonal_bucket}/d"]
    assert _lookups(flux_server) == 1
    flux_server.reset_stats()
    second = make_fs(flux_server)
    assert second.ls(zonal_bucket) == [f"{zonal_bucket}/d"]
    assert second.find(zonal_bucket) == [f"{zonal_bucket}/d/k"]
    assert second.info(f"{zonal_bucket}/d")["type"] == "directory"
    assert layout_sync(second.client, zonal_bucket).zonal
    assert _lookups(flux_server) == 0


def test_another_endpoint_is_asked(flux_server, zonal_bucket):
    assert layout_sync(make_fs(flux_server).client, zonal_bucket).zonal
    with run() as other:  # a bucket of the same name, standard there
        other.create_bucket(zonal_bucket)
        other.reset_stats()
        lay = layout_sync(make_fs(other).client, zonal_bucket)
        assert (lay.kind, lay.source) == ("standard", "storageLayout")
        assert _lookups(other) == 1


def test_an_answer_older_than_the_ttl_is_asked_again(flux_server, zonal_bucket, monkeypatch):
    assert layout_sync(make_fs(flux_server).client, zonal_bucket).zonal
    monkeypatch.setattr(layouts, "SHARED_TTL", 0.0)
    flux_server.reset_stats()
    assert layout_sync(make_fs(flux_server).client, zonal_bucket).zonal
    assert _lookups(flux_server) == 1


def test_a_bucket_deleted_and_made_again_is_asked_again(flux_server, zonal_bucket):
    fs = make_fs(flux_server)
    assert layout_sync(fs.client, zonal_bucket).zonal
    fs.rmdir(zonal_bucket)
    fs.mkdir(zonal_bucket)  # standard this time
    for each in (fs, make_fs(flux_server)):
        assert layout_sync(each.client, zonal_bucket).kind == "standard"


def test_a_denied_lookup_is_not_shared(flux_server, zonal_bucket):
    flux_server.configure(deny_ops={"bucket"})
    denied = layout_sync(make_fs(flux_server).client, zonal_bucket)
    assert (denied.kind, denied.source) == ("standard", "denied")
    flux_server.configure(profile="local")
    assert layout_sync(make_fs(flux_server).client, zonal_bucket).zonal  # other credentials may be allowed


def test_a_forked_child_keeps_the_parents_answers(flux_server, zonal_bucket):
    assert layout_sync(make_fs(flux_server).client, zonal_bucket).zonal
    flux_server.reset_stats()
    pid = os.fork()
    if pid == 0:  # the child: a filesystem of its own, no request
        try:
            ok = layout_sync(make_fs(flux_server).client, zonal_bucket).zonal
        except BaseException:
            ok = False
        os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert _lookups(flux_server) == 0

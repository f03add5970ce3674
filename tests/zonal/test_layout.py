"""Bucket layouts (standard, HNS, zonal) learned once per bucket per filesystem, declared ones without a request,
and servers that do not answer: standard within the lookup's deadline, or the unreachable endpoint named."""
from __future__ import annotations

import socket
import threading
import time

import pytest

from fluxfs.errors import ServerUnreachable
from fluxfs.zonal import layout_sync
from fluxfs.zonal.layout import LOOKUP_DEADLINE
from tests.conftest import make_fs, new_bucket_name


def _zonal_bucket(fs) -> str:
    name = new_bucket_name()
    fs.mkdir(name, placement="us-central1-a", location="us-central1")
    return name


def test_regional_bucket_is_standard_and_learned_once(flux_server, bucket):
    fs = make_fs(flux_server, zonal_transport="http")
    flux_server.reset_stats()
    first, second = layout_sync(fs.client, bucket), layout_sync(fs.client, bucket)
    assert (first.kind, first.zonal, first.hns, first.source) == ("standard", False, False, "storageLayout")
    assert second == first
    assert flux_server.stats()["requests"] == {"bucket": 1}


def test_zonal_bucket_made_by_mkdir_placement(flux_server):
    fs = make_fs(flux_server, zonal_transport="http")
    name = _zonal_bucket(fs)
    res = fs.call("GET", f"b/{name}", json_out=True)
    assert res["storageClass"] == "RAPID" and res["locationType"] == "zone" and res["location"] == "US-CENTRAL1"
    assert res["customPlacementConfig"] == {"dataLocations": ["us-central1-a"]}
    assert res["hierarchicalNamespace"] == {"enabled": True}
    assert res["iamConfiguration"] == {"uniformBucketLevelAccess": {"enabled": True}}
    other = make_fs(flux_server, zonal_transport="http")
    flux_server.reset_stats()
    got = [layout_sync(other.client, name) for _ in range(3)]
    assert got[0].zonal and got[0].hns and got[0].location == "US-CENTRAL1" and got.count(got[0]) == 3
    assert flux_server.stats()["requests"] == {"bucket": 1}


def test_hns_bucket(flux_server):
    fs = make_fs(flux_server, zonal_transport="http")
    name = new_bucket_name()
    fs.mkdir(name, enable_hierarchical_namespace=True)
    lay = layout_sync(make_fs(flux_server, zonal_transport="http").client, name)
    assert (lay.kind, lay.hns, lay.zonal) == ("hns", True, False)


def test_declared_layouts_make_no_request(flux_server):
    zonal_name = _zonal_bucket(make_fs(flux_server, zonal_transport="http"))
    fs = make_fs(flux_server, zonal_transport="http", bucket_types={"declared-zonal": "zonal", "*": "standard"})
    flux_server.reset_stats()
    assert layout_sync(fs.client, "declared-zonal").zonal
    assert layout_sync(fs.client, zonal_name).kind == "standard"  # "*" covers it: the server is not asked
    assert flux_server.stats()["requests"] == {}


def test_fake_gcs_server_is_standard_fast(fake_gcs):
    fs = make_fs(fake_gcs)
    name = new_bucket_name()
    fake_gcs.create_bucket(name)
    t0 = time.monotonic()
    lay = layout_sync(fs.client, name)
    assert time.monotonic() - t0 < 3
    assert (lay.kind, lay.zonal) == ("standard", False)


@pytest.fixture
def silent_endpoint():
    """A server that accepts connections and never answers (as a gRPC-only or stuck endpoint looks to HTTP)."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(16)
    held, stop = [], threading.Event()

    def accept():
        srv.settimeout(0.1)
        while not stop.is_set():
            try:
                held.append(srv.accept()[0])
            except OSError:
                pass

    t = threading.Thread(target=accept, daemon=True)
    t.start()
    yield f"http://127.0.0.1:{srv.getsockname()[1]}"
    stop.set()
    t.join()
    for c in held:
        c.close()
    srv.close()


def test_silent_server_is_standard_within_the_deadline_and_remembered(silent_endpoint):
    from fluxfs import FluxFileSystem

    fs = FluxFileSystem(endpoint_url=silent_endpoint, token="anon", skip_instance_cache=True)
    t0 = time.monotonic()
    lay = layout_sync(fs.client, "some-bucket")
    took = time.monotonic() - t0
    assert (lay.kind, lay.source) == ("standard", "unanswered")
    assert LOOKUP_DEADLINE - 0.1 < took < 3
    t0 = time.monotonic()
    assert layout_sync(fs.client, "some-bucket") == lay and time.monotonic() - t0 < 0.1  # not asked again


def test_closed_port_names_the_endpoint_fast():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    from fluxfs import FluxFileSystem

    fs = FluxFileSystem(endpoint_url=f"http://127.0.0.1:{port}", token="anon", skip_instance_cache=True)
    t0 = time.monotonic()
    with pytest.raises(ServerUnreachable, match=str(port)):
        layout_sync(fs.client, "some-bucket")
    assert time.monotonic() - t0 < 3


@pytest.mark.parametrize("value, message", [
    ({"b1": "rapid"}, "bucket_types: bucket 'b1' has type 'rapid'; use one of standard, hns, zonal"),
    ("b1=zonal,=hns", "bucket_types: '' is not a bucket name"),
    ({"b1/k": "zonal"}, "bucket_types: 'b1/k' is not a bucket name"),
    (5, "bucket_types must map bucket names to one of standard, hns, zonal"),
])
def test_bad_bucket_types_are_refused_naming_them(flux_server, value, message):
    with pytest.raises(ValueError) as err:
        make_fs(flux_server, zonal_transport="http", bucket_types=value)
    assert message in str(err.value)


def test_bucket_types_as_text(flux_server):
    fs = make_fs(flux_server, zonal_transport="http", bucket_types="b1=zonal, b2=HNS, *=standard")
    assert fs.options.bucket_types == {"b1": "zonal", "b2": "hns", "*": "standard"}
    fs = make_fs(flux_server, zonal_transport="http", bucket_types="standard")
    assert fs.options.bucket_types == {"*": "standard"}


@pytest.mark.parametrize("kwargs, message", [
    ({"placement": "us"}, "placement must be a zone such as 'us-central1-a', not 'us'"),
    ({"placement": "us-east1-b", "location": "us-central1"},
     "zone 'us-east1-b' is not in location 'us-central1' (a zonal bucket's location is its zone's region"),
])
def test_bad_placement_is_refused_and_makes_no_bucket(flux_server, kwargs, message):
    fs = make_fs(flux_server, zonal_transport="http")
    name = new_bucket_name()
    with pytest.raises(ValueError) as err:
        fs.mkdir(name, **kwargs)
    assert f"mkdir {name}: {message}" in str(err.value)
    assert name not in fs.ls("")


def test_concurrent_lookups_of_one_bucket_make_one_request(flux_server, bucket):
    import asyncio

    from fluxfs.support import run
    from fluxfs.zonal.layout import layout

    fs = make_fs(flux_server, zonal_transport="http")
    flux_server.configure(latency_ms=100)  # the lookups overlap

    async def many():
        return await asyncio.gather(*(layout(fs.client, bucket) for _ in range(10)))

    flux_server.reset_stats()
    got = run(fs, many)
    assert {g.kind for g in got} == {"standard"} and flux_server.stats()["requests"] == {"bucket": 1}

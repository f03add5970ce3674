"""The GCS limits the server enforces (fluxfs.gcs.limits), and the settings tests lower them with."""
from __future__ import annotations

import json

import pytest

from fluxfs.gcs.limits import LEGACY_MAX_COMPONENTS, XML_MAX_PARTS

from .raw import obj_path, request, upload
from .test_multipart import _initiate, _part


def _put(srv, bkt, name):
    assert upload(srv.url, bkt, name, b"x").status == 200


def _compose(srv, bkt, dest, sources):
    body = json.dumps({"sourceObjects": [{"name": s} for s in sources]}).encode()
    return request(srv.url, "POST", obj_path(bkt, dest) + "/compose", body, {"Content-Type": "application/json"})


def test_defaults_are_the_shared_constants(srv):
    s = srv.configure()
    assert s["max_components"] is None  # GCS documents no component limit today
    assert s["max_parts"] == XML_MAX_PARTS == 10_000


def test_compose_beyond_1024_components_by_default(srv, bkt):
    """As GCS today: no component limit (1 to 32 sources per compose is the only rule)."""
    _put(srv, bkt, "one")
    assert _compose(srv, bkt, "c32", ["one"] * 32).json()["componentCount"] == 32
    assert _compose(srv, bkt, "c1024", ["c32"] * 32).json()["componentCount"] == LEGACY_MAX_COMPONENTS
    r = _compose(srv, bkt, "c1025", ["c1024", "one"])
    assert r.status == 200 and r.json()["componentCount"] == LEGACY_MAX_COMPONENTS + 1
    srv.configure(max_components=LEGACY_MAX_COMPONENTS)  # emulating a server that keeps the old limit
    r = _compose(srv, bkt, "c1025b", ["c1024", "one"])
    assert r.status == 400 and "1025 components; the limit is 1024" in r.body.decode()
    srv.configure(max_components=None)
    assert _compose(srv, bkt, "c1025c", ["c1024", "one"]).status == 200


def test_component_count_limit(srv, bkt):
    srv.configure(max_components=5)
    for i in range(3):
        _put(srv, bkt, f"p{i}")
    r = _compose(srv, bkt, "c3", ["p0", "p1", "p2"])
    assert r.status == 200 and r.json()["componentCount"] == 3
    assert _compose(srv, bkt, "c5", ["c3", "p0", "p1"]).json()["componentCount"] == 5
    r = _compose(srv, bkt, "c6", ["c3", "p0", "p1", "p2"])
    assert r.status == 400 and "6 components; the limit is 5" in r.body.decode()


def test_part_number_limit(srv, bkt):
    srv.configure(max_parts=3)
    uid = _initiate(srv.url, bkt, "k")
    assert _part(srv.url, bkt, "k", uid, 3, b"x").status == 200
    r = _part(srv.url, bkt, "k", uid, 4, b"x")
    assert r.status == 400 and "between 1 and 3" in r.body.decode()


@pytest.mark.parametrize("setting", ["max_parts", "max_components"])
def test_limit_settings_are_validated(srv, setting):
    with pytest.raises(Exception, match=setting):
        srv.configure(**{setting: 0})

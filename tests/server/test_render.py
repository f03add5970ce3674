"""Object resources rendered as cached JSON text (objjson.py) say exactly what the generic
dict-then-filter path says, and a change to an object is never hidden by its cached text."""
from __future__ import annotations

import json

import pytest

from fluxfs.server.fields import apply_fields, parse_fields
from fluxfs.server.objjson import entries_json, object_json, objects_json
from fluxfs.server.store import Store

from .raw import obj_path, request, upload

SELECTIONS = [None, "name", "items", "name,size,generation,crc32c,updated", "updated,name,kind,nosuch",
              "md5Hash,componentCount,metadata,etag,id,selfLink,mediaLink", "contentEncoding,cacheControl,bucket",
              "metadata/k1", "metadata(k1,é),name", "timeCreated,timeStorageClassUpdated,storageClass,contentType"]


def _objects():
    st = Store()
    st.generate("bkt", 3, size=0, prefix="empty/")
    st.generate("bkt", 3, size=(1, 5000), prefix="synth/", seed=7)
    st.generate("bkt", 3, size=10, prefix="fixed/", seed=3)
    st.put("bkt", "plain", b"hello")
    st.put("bkt", "dir/ü ñ %2F?#\t\"quote\"", b"x" * 100, content_type="text/plain; charset=é",
           metadata={"k1": "v1", "é": "ü\"\\"}, extra={"cacheControl": "no-cache", "contentEncoding": "gzip"})
    st.put("bkt", "composite", b"abc" * 10, component_count=3)
    st.patch("bkt", "plain", {"metadata": {"a": "1"}, "customTime": "2024-01-01T00:00:00Z"})
    objs, _, _ = st.list("bkt")
    return st, objs  # views of synthetic objects plus stored ones


@pytest.mark.parametrize("spec", SELECTIONS)
def test_rendered_json_equals_generic_path(spec):
    st, objs = _objects()
    tree = parse_fields(spec) if spec else None
    sub = tree.get("items") if tree and "items" in tree else tree
    expect = [json.dumps(apply_fields(o.resource("bkt", "http://h:1", sub), sub), separators=(",", ":"))
              for o in objs]
    assert len(objs) == 12
    entries = st.list("bkt", raw=True)[0]
    for _ in range(2):  # the second round comes from the per-object cache and per-batch templates
        assert [object_json(o, "bkt", "http://h:1", sub) for o in objs] == expect
        assert objects_json(objs, "bkt", "http://h:1", sub) == "[" + ",".join(expect) + "]"
        assert entries_json(entries, "bkt", "http://h:1", sub) == "[" + ",".join(expect) + "]"
    # A materialized synthetic object renders like its transient view.
    view = objs[0]
    assert object_json(st.get("bkt", view.name), "bkt", "http://h:1", sub) == expect[0]


def test_cached_json_follows_patch_and_overwrite(srv, bkt):
    url = srv.url
    assert upload(url, bkt, "a/obj", b"one").status == 200
    path = obj_path(bkt, "a/obj")
    first = request(url, "GET", path).json()
    listed = request(url, "GET", f"/storage/v1/b/{bkt}/o", params={"fields": "items(name,metadata,generation)"})
    assert listed.json()["items"] == [{"name": "a/obj", "generation": first["generation"]}]

    r = request(url, "PATCH", path, json.dumps({"metadata": {"k": "v"}}).encode(),
                {"Content-Type": "application/json"})
    assert r.status == 200 and r.json()["metadata"] == {"k": "v"}
    again = request(url, "GET", path).json()
    assert again["metadata"] == {"k": "v"} and again["metageneration"] == "2"
    listed = request(url, "GET", f"/storage/v1/b/{bkt}/o", params={"fields": "items(name,metadata,generation)"})
    assert listed.json()["items"] == [{"name": "a/obj", "metadata": {"k": "v"}, "generation": first["generation"]}]

    assert upload(url, bkt, "a/obj", b"two!").status == 200
    third = request(url, "GET", path, params={"fields": "size,generation"}).json()
    assert third["size"] == "4" and int(third["generation"]) > int(first["generation"])
    assert list(third) == ["size", "generation"]  # keys in the selection's order, as before

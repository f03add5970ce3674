"""Request preconditions (ifGenerationMatch, ifGenerationNotMatch, ifMetagenerationMatch) -> 412.

fluxfs server only: fake-gcs-server ignores most of them (it performs the request where GCS
answers 412). GCS doc: "Request preconditions".
"""
from __future__ import annotations

import urllib.parse

from .wire import assert_gcs_error, quote


def test_upload_if_generation_match_zero_creates_only(fwire, bucket):
    assert fwire.upload_media(bucket, "once", b"1", ifGenerationMatch="0").status == 200
    assert_gcs_error(fwire.upload_media(bucket, "once", b"2", ifGenerationMatch="0"), 412)
    assert fwire.get_media(bucket, "once").body == b"1"


def test_upload_if_generation_match(fwire, bucket):
    gen = fwire.put(bucket, "o", b"1")["generation"]
    assert_gcs_error(fwire.upload_media(bucket, "o", b"x", ifGenerationMatch=str(int(gen) + 1)), 412)
    r = fwire.upload_media(bucket, "o", b"2", ifGenerationMatch=gen)
    assert r.status == 200, r
    assert int(r.json()["generation"]) > int(gen)
    assert fwire.get_media(bucket, "o").body == b"2"


def test_upload_if_generation_not_match(fwire, bucket):
    gen = fwire.put(bucket, "o", b"1")["generation"]
    assert_gcs_error(fwire.upload_media(bucket, "o", b"x", ifGenerationNotMatch=gen), 412)
    assert fwire.upload_media(bucket, "o", b"2", ifGenerationNotMatch="1").status == 200


def test_upload_if_metageneration_match(fwire, bucket):
    fwire.put(bucket, "o", b"1")
    assert_gcs_error(fwire.upload_media(bucket, "o", b"x", ifMetagenerationMatch="7"), 412)
    assert fwire.upload_media(bucket, "o", b"2", ifMetagenerationMatch="1").status == 200


def test_multipart_and_resumable_honour_if_generation_match_zero(fwire, bucket):
    fwire.put(bucket, "exists", b"1")
    assert_gcs_error(fwire.upload_multipart(bucket, {"name": "exists"}, b"2", ifGenerationMatch="0"), 412)
    r = fwire.request("POST", f"/upload/storage/v1/b/{bucket}/o",
                      params={"uploadType": "resumable", "name": "exists", "ifGenerationMatch": "0"}, json={})
    if r.status == 200:  # GCS may check at initiation or when the upload completes; either way: 412, no write
        loc = urllib.parse.urlsplit(r.header("location"))
        r = fwire.request("PUT", f"{loc.path}?{loc.query}", body=b"2")
    assert_gcs_error(r, 412)
    assert fwire.get_media(bucket, "exists").body == b"1"


def test_get_if_generation_match(fwire, bucket):
    gen = fwire.put(bucket, "o", b"1")["generation"]
    assert_gcs_error(fwire.get_meta(bucket, "o", ifGenerationMatch=str(int(gen) + 1)), 412)
    assert fwire.get_media(bucket, "o", ifGenerationMatch=str(int(gen) + 1)).status == 412
    assert fwire.get_media(bucket, "o", ifGenerationMatch=gen).body == b"1"
    assert fwire.get_meta(bucket, "o", ifMetagenerationMatch="1").status == 200
    assert_gcs_error(fwire.get_meta(bucket, "o", ifMetagenerationMatch="2"), 412)


def test_delete_preconditions(fwire, bucket):
    gen = fwire.put(bucket, "o", b"1")["generation"]
    assert_gcs_error(fwire.delete(bucket, "o", ifGenerationMatch=str(int(gen) + 1)), 412)
    assert_gcs_error(fwire.delete(bucket, "o", ifGenerationNotMatch=gen), 412)
    assert_gcs_error(fwire.delete(bucket, "o", ifMetagenerationMatch="2"), 412)
    assert fwire.get_media(bucket, "o").body == b"1"  # still there
    assert fwire.delete(bucket, "o", ifGenerationMatch=gen).status == 204
    assert fwire.get_meta(bucket, "o").status == 404


def test_patch_if_metageneration_match(fwire, bucket):
    fwire.put(bucket, "o", b"1")
    path = fwire.obj_path(bucket, "o")
    assert_gcs_error(fwire.request("PATCH", path, params={"ifMetagenerationMatch": "2"},
                                   json={"metadata": {"k": "v"}}), 412)
    r = fwire.request("PATCH", path, params={"ifMetagenerationMatch": "1"}, json={"metadata": {"k": "v"}})
    assert r.status == 200, r
    assert r.json()["metageneration"] == "2" and r.json()["metadata"] == {"k": "v"}


def test_copy_preconditions(fwire, bucket):
    sgen = fwire.put(bucket, "src", b"source")["generation"]
    fwire.put(bucket, "dst", b"old")
    copy = f"{fwire.obj_path(bucket, 'src')}/copyTo/b/{bucket}/o/{quote('dst')}"
    assert_gcs_error(fwire.request("POST", copy, params={"ifGenerationMatch": "0"}, json={}), 412)
    assert_gcs_error(fwire.request("POST", copy, params={"ifSourceGenerationMatch": str(int(sgen) + 1)},
                                   json={}), 412)
    assert fwire.get_media(bucket, "dst").body == b"old"
    assert fwire.request("POST", copy, params={"ifSourceGenerationMatch": sgen}, json={}).status == 200
    assert fwire.get_media(bucket, "dst").body == b"source"


def test_rewrite_preconditions(fwire, bucket):
    fwire.put(bucket, "src", b"source")
    fwire.put(bucket, "dst", b"old")
    rewrite = f"{fwire.obj_path(bucket, 'src')}/rewriteTo/b/{bucket}/o/{quote('dst')}"
    assert_gcs_error(fwire.request("POST", rewrite, params={"ifGenerationMatch": "0"}, json={}), 412)
    assert fwire.get_media(bucket, "dst").body == b"old"


def test_compose_destination_if_generation_match(fwire, bucket):
    fwire.put(bucket, "a", b"A")
    gen = fwire.put(bucket, "dst", b"old")["generation"]
    assert_gcs_error(fwire.compose(bucket, "dst", ["a", "a"], ifGenerationMatch="0"), 412)
    assert_gcs_error(fwire.compose(bucket, "dst", ["a", "a"], ifGenerationMatch=str(int(gen) + 1)), 412)
    assert fwire.get_media(bucket, "dst").body == b"old"
    r = fwire.compose(bucket, "dst", ["a", "a"], ifGenerationMatch=gen)
    assert r.status == 200, r
    assert fwire.get_media(bucket, "dst").body == b"AA"


def test_compose_source_preconditions(fwire, bucket):
    """JSON API objects: compose: sourceObjects[].objectPreconditions.ifGenerationMatch fails the call with 412."""
    gen = fwire.put(bucket, "a", b"A")["generation"]
    src = [{"name": "a", "objectPreconditions": {"ifGenerationMatch": str(int(gen) + 1)}}]
    assert_gcs_error(fwire.compose(bucket, "dst", src), 412)
    assert fwire.get_meta(bucket, "dst").status == 404
    src = [{"name": "a", "objectPreconditions": {"ifGenerationMatch": gen}}]
    assert fwire.compose(bucket, "dst", src).status == 200

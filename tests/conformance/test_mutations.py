"""copyTo, rewriteTo, patch and delete."""
from __future__ import annotations

import os

from tests.conftest import new_bucket_name

from .wire import assert_gcs_error, crc32c_b64, quote


def test_copy_to(wire, any_bucket):
    data = os.urandom(3000)
    src_gen = wire.put(any_bucket, "src/a", data)["generation"]
    r = wire.request("POST", f"{wire.obj_path(any_bucket, 'src/a')}/copyTo/b/{any_bucket}/o/{quote('dst/b')}",
                     json={})
    assert r.status == 200, r
    meta = r.json()
    assert meta["name"] == "dst/b" and meta["size"] == "3000" and meta["crc32c"] == crc32c_b64(data)
    assert int(meta["generation"]) > int(src_gen)  # a new write, a later generation
    assert wire.get_media(any_bucket, "dst/b").body == data
    assert wire.get_media(any_bucket, "src/a").body == data


def test_copy_across_buckets(wire, gcs_server, any_bucket):
    other = new_bucket_name()
    gcs_server.create_bucket(other)
    wire.put(any_bucket, "x", b"payload")
    r = wire.request("POST", f"{wire.obj_path(any_bucket, 'x')}/copyTo/b/{other}/o/{quote('y')}", json={})
    assert r.status == 200, r
    assert wire.get_media(other, "y").body == b"payload"


def test_rewrite_to(wire, any_bucket):
    data = os.urandom(2048)
    wire.put(any_bucket, "r/src", data)
    r = wire.request("POST", f"{wire.obj_path(any_bucket, 'r/src')}/rewriteTo/b/{any_bucket}/o/{quote('r/dst')}",
                     json={})
    assert r.status == 200, r
    body = r.json()
    assert body["kind"] == "storage#rewriteResponse" and body["done"] is True
    assert body["totalBytesRewritten"] == "2048" and body["objectSize"] == "2048"
    assert body["resource"]["name"] == "r/dst" and body["resource"]["crc32c"] == crc32c_b64(data)
    assert wire.get_media(any_bucket, "r/dst").body == data


def test_copy_missing_source_is_404(wire, any_bucket):
    r = wire.request("POST", f"{wire.obj_path(any_bucket, 'nope')}/copyTo/b/{any_bucket}/o/dst", json={})
    assert_gcs_error(r, 404)


def test_delete(wire, any_bucket):
    wire.put(any_bucket, "d", b"x")
    r = wire.delete(any_bucket, "d")
    assert 200 <= r.status < 300, r
    assert wire.get_meta(any_bucket, "d").status == 404
    assert_gcs_error(wire.delete(any_bucket, "d"), 404)


def test_delete_is_204_empty(fwire, bucket):
    """JSON API objects: delete: success is an empty response, HTTP 204 (fake-gcs-server: 200 'null')."""
    fwire.put(bucket, "d", b"x")
    r = fwire.delete(bucket, "d")
    assert r.status == 204 and r.body == b"", r


def test_patch_metadata(fwire, bucket):
    """JSON API objects: patch: metadata changes bump metageneration, not generation; null removes a key.

    fake-gcs-server answers patch with a different resource shape (no metageneration).
    """
    data = b"patched"
    gen = fwire.put(bucket, "p", data)["generation"]
    r = fwire.request("PATCH", fwire.obj_path(bucket, "p"),
                      json={"metadata": {"a": "1", "b": "2"}, "contentType": "text/plain"})
    assert r.status == 200, r
    meta = r.json()
    assert meta["generation"] == gen and meta["metageneration"] == "2"
    assert meta["metadata"] == {"a": "1", "b": "2"} and meta["contentType"] == "text/plain"
    r = fwire.request("PATCH", fwire.obj_path(bucket, "p"), json={"metadata": {"a": None}})
    assert r.json()["metadata"] == {"b": "2"} and r.json()["metageneration"] == "3"
    assert fwire.get_media(bucket, "p").body == data


def test_patch_missing_is_404(wire, any_bucket):
    assert_gcs_error(wire.request("PATCH", wire.obj_path(any_bucket, "nope"), json={"metadata": {}}), 404)


def test_move_within_a_bucket(fwire, bucket):
    """JSON API objects: move. The source disappears and the destination appears in one step;
    ifSourceGenerationMatch pins the source (fake-gcs-server has no moveTo)."""
    data = os.urandom(1500)
    gen = fwire.put(bucket, "m/src", data)["generation"]
    stale = fwire.request("POST", f"{fwire.obj_path(bucket, 'm/src')}/moveTo/o/{quote('m/dst')}"
                                  f"?ifSourceGenerationMatch={int(gen) + 1}")
    assert_gcs_error(stale, 412)
    r = fwire.request("POST", f"{fwire.obj_path(bucket, 'm/src')}/moveTo/o/{quote('m/dst')}"
                              f"?ifSourceGenerationMatch={gen}")
    assert r.status == 200, r
    assert r.json()["name"] == "m/dst" and r.json()["crc32c"] == crc32c_b64(data)
    assert fwire.get_media(bucket, "m/dst").body == data
    assert_gcs_error(fwire.request("GET", fwire.obj_path(bucket, "m/src")), 404)


def test_gcsfs_mv_uses_move(flux_server, bucket):
    """gcsfs's mv asks for objects.move first; against our server it must succeed without its fallback."""
    import gcsfs.core

    fs = gcsfs.core.GCSFileSystem(endpoint_url=flux_server.url, token="anon")
    fs.pipe(f"{bucket}/a", b"moved")
    flux_server.reset_stats()
    fs.mv(f"{bucket}/a", f"{bucket}/b")
    assert fs.cat(f"{bucket}/b") == b"moved" and not fs.exists(f"{bucket}/a")
    assert flux_server.stats()["requests"].get("delete", 0) == 0  # no copy + delete fallback

"""Copies to and from zonal (Rapid) buckets, where GCS has no rewrite or copy: the embedded server refuses them
(400 naming the zonal bucket), and fluxfs's cp/copy/mv read and write the bytes instead, keeping what a
server-side copy keeps; mv deletes the source only once the destination is complete."""
from __future__ import annotations

import os
from urllib.parse import quote

import pytest
import requests

from tests.conftest import make_fs, new_bucket_name

META = {"content_type": "application/x-thing", "metadata": {"owner": "ann", "step": "7"},
        "fixed_key_metadata": {"cache_control": "no-cache", "content_disposition": "attachment; filename=x.bin",
                               "content_language": "fr"}}
KEPT = {"contentType": "application/x-thing", "metadata": {"owner": "ann", "step": "7"}, "cacheControl": "no-cache",
        "contentDisposition": "attachment; filename=x.bin", "contentLanguage": "fr"}


@pytest.fixture
def zonal_bucket(flux_server) -> str:
    name = new_bucket_name()
    make_fs(flux_server).mkdir(name, placement="us-central1-a", location="us-central1")
    return name


def _kept(info: dict) -> dict:
    return {k: info.get(k) for k in KEPT}


def _put(fs, path: str, size: int) -> bytes:
    data = os.urandom(size)
    fs.pipe_file(path, data, **META)
    return data


@pytest.mark.parametrize("size", [0, 5, 3 * 2**20 + 7])
def test_cp_within_a_zonal_bucket_streams_bytes_and_metadata(flux_server, zonal_bucket, size):
    fs = make_fs(flux_server, multipart="resumable", part_size=2**18)  # several parts, several reads
    data = _put(fs, f"{zonal_bucket}/src/a.bin", size)
    flux_server.reset_stats()
    fs.cp(f"{zonal_bucket}/src/a.bin", f"{zonal_bucket}/dst/a.bin")
    assert "copy" not in flux_server.stats()["requests"]  # neither rewriteTo nor copyTo was sent
    fresh = make_fs(flux_server)
    assert fresh.cat(f"{zonal_bucket}/dst/a.bin") == data
    assert _kept(fresh.info(f"{zonal_bucket}/dst/a.bin")) == KEPT
    assert fresh.cat(f"{zonal_bucket}/src/a.bin") == data  # the source is untouched


def test_cp_zonal_to_regional_and_back(flux_server, zonal_bucket, bucket):
    fs = make_fs(flux_server)
    data = _put(fs, f"{zonal_bucket}/a.bin", 1000)
    flux_server.reset_stats()
    fs.cp(f"{zonal_bucket}/a.bin", f"{bucket}/b.bin")
    fs.copy(f"{bucket}/b.bin", f"{zonal_bucket}/c.bin")
    assert "copy" not in flux_server.stats()["requests"]
    fresh = make_fs(flux_server)
    for path in (f"{bucket}/b.bin", f"{zonal_bucket}/c.bin"):
        assert fresh.cat(path) == data and _kept(fresh.info(path)) == KEPT


def test_cp_between_regional_buckets_is_still_a_rewrite(flux_server, bucket):
    fs = make_fs(flux_server)
    data = _put(fs, f"{bucket}/a.bin", 100)
    flux_server.reset_stats()
    fs.cp(f"{bucket}/a.bin", f"{bucket}/b.bin")
    assert flux_server.stats()["requests"].get("copy") == 1  # one rewriteTo
    assert fs.cat(f"{bucket}/b.bin") == data


def test_cp_recursive_from_zonal_copies_every_object_and_its_metadata(flux_server, zonal_bucket, bucket):
    data = {f"{zonal_bucket}/d/{n}": os.urandom(50 + i) for i, n in enumerate(["x", "y", "sub/z"])}
    for path, body in data.items():
        make_fs(flux_server).pipe_file(path, body, **META)
    fs = make_fs(flux_server)
    fs.find(zonal_bucket)  # the listing cache holds entries without metadata (the lister asks for a few fields)
    fs.cp(f"{zonal_bucket}/d", f"{bucket}/out", recursive=True)
    fresh = make_fs(flux_server)
    assert fresh.cat(f"{bucket}/out", recursive=True) == {p.replace(f"{zonal_bucket}/d", f"{bucket}/out"): v
                                                          for p, v in data.items()}
    for path in data:  # each asked of the server (a filesystem whose listing cache is empty)
        assert _kept(make_fs(flux_server).info(path.replace(f"{zonal_bucket}/d", f"{bucket}/out"))) == KEPT


def _check_mv(flux_server, src: str, dst: str) -> None:
    """`src` written with META and moved to `dst`: there with its bytes and metadata, and gone from `src`."""
    fs = make_fs(flux_server)
    data = _put(fs, src, 2000)
    fs.mv(src, dst)
    fresh = make_fs(flux_server)
    assert fresh.cat(dst) == data and _kept(fresh.info(dst)) == KEPT
    assert not fresh.exists(src)


def test_mv_zonal_to_regional_deletes_the_source_after_the_copy(flux_server, zonal_bucket, bucket):
    _check_mv(flux_server, f"{zonal_bucket}/a.bin", f"{bucket}/a.bin")


def test_mv_within_a_zonal_bucket(flux_server, zonal_bucket):
    _check_mv(flux_server, f"{zonal_bucket}/a.bin", f"{zonal_bucket}/moved/a.bin")


def test_mv_whose_write_fails_keeps_the_source(flux_server, zonal_bucket, bucket):
    fs = make_fs(flux_server)
    data = _put(fs, f"{zonal_bucket}/a.bin", 2000)
    flux_server.configure(deny_ops={"write"})
    with pytest.raises(PermissionError, match=f"{bucket}/a.bin"):
        fs.mv(f"{zonal_bucket}/a.bin", f"{bucket}/a.bin")
    flux_server.configure(profile="local")
    fresh = make_fs(flux_server)
    assert fresh.cat(f"{zonal_bucket}/a.bin") == data
    assert not fresh.exists(f"{bucket}/a.bin")


def test_cp_with_an_acl_on_zonal_refused_naming_it(flux_server, zonal_bucket, bucket):
    fs = make_fs(flux_server)
    _put(fs, f"{bucket}/a.bin", 10)
    with pytest.raises(ValueError, match=f"acl='publicRead'.*{zonal_bucket}/a.bin|{zonal_bucket}/a.bin.*acl"):
        fs.cp_file(f"{bucket}/a.bin", f"{zonal_bucket}/a.bin", acl="publicRead")
    assert not make_fs(flux_server).exists(f"{zonal_bucket}/a.bin")


@pytest.mark.parametrize("verb", ["rewriteTo", "copyTo"])
@pytest.mark.parametrize("zonal_side", ["source", "destination"])
def test_server_refuses_a_raw_rewrite_or_copy_on_zonal(flux_server, zonal_bucket, bucket, verb, zonal_side):
    fs = make_fs(flux_server)
    src, dst = (zonal_bucket, bucket) if zonal_side == "source" else (bucket, zonal_bucket)
    fs.pipe_file(f"{src}/k", b"abc")
    url = f"{flux_server.url}/storage/v1/b/{src}/o/{quote('k', safe='')}/{verb}/b/{dst}/o/k2"
    r = requests.post(url, json={}, timeout=10)
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["code"] == 400 and err["errors"][0]["reason"] == "invalid"
    op = "Rewrite" if verb == "rewriteTo" else "Copy"
    assert err["message"].startswith(f"{op} is not supported for objects in zonal buckets")
    assert f"bucket {zonal_bucket} is zonal" in err["message"]
    assert not make_fs(flux_server).exists(f"{dst}/k2")


def test_server_refuses_an_xml_copy_source_put_on_zonal(flux_server, zonal_bucket, bucket):
    make_fs(flux_server).pipe_file(f"{bucket}/k", b"abc")
    r = requests.put(f"{flux_server.url}/{zonal_bucket}/k2", headers={"x-goog-copy-source": f"/{bucket}/k"},
                     data=b"", timeout=10)
    assert r.status_code == 400, r.text
    assert "<Code>InvalidArgument</Code>" in r.text and f"bucket {zonal_bucket} is zonal" in r.text
    assert not make_fs(flux_server).exists(f"{zonal_bucket}/k2")

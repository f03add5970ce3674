"""The storage-control gRPC API on the embedded server's port (google-cloud-storage-control's own async client over
an insecure channel): storage layouts as gcsfs reads them, and HNS folders over the same folder store as the JSON
API, a rename as a long-running operation polled to its end."""
from __future__ import annotations

import pytest
from google.api_core import exceptions

from tests.server import raw
from tests.zonal.server.grpcutil import arun, control, make_bucket

HNS = {"location": "us-east1", "hierarchicalNamespace": {"enabled": True},
       "iamConfiguration": {"uniformBucketLevelAccess": {"enabled": True}}}


async def _call(url, method, **kw):
    client = control(url)
    try:
        out = await getattr(client, method)(**kw)
        if method == "rename_folder":
            return await out.result(timeout=10), out
        if method == "list_folders":
            return [f.name async for f in out]
        return out
    finally:
        await client.transport.close()


def _layout(url, bucket):
    return arun(_call(url, "get_storage_layout", name=f"projects/_/buckets/{bucket}/storageLayout"))


def test_storage_layout_of_zonal_hns_and_standard_buckets(srv):
    zonal = _layout(srv.url, make_bucket(srv.url))
    assert (zonal.location_type, zonal.hierarchical_namespace.enabled) == ("zone", True)
    assert list(zonal.custom_placement_config.data_locations) == ["us-central1-a"]
    hns = _layout(srv.url, make_bucket(srv.url, **HNS))
    assert (hns.location, hns.location_type, hns.hierarchical_namespace.enabled) == ("US-EAST1", "region", True)
    plain = _layout(srv.url, make_bucket(srv.url, location="US"))
    assert (plain.location_type, plain.hierarchical_namespace.enabled) == ("multi-region", False)


def test_storage_layout_of_a_missing_bucket_is_not_found_naming_it(srv):
    with pytest.raises(exceptions.NotFound, match="bucket does not exist: no-such-bucket-y"):
        _layout(srv.url, "no-such-bucket-y")


def test_folders_created_listed_renamed_and_deleted(srv):
    b = make_bucket(srv.url)
    parent = f"projects/_/buckets/{b}"
    made = arun(_call(srv.url, "create_folder", request={"parent": parent, "folder_id": "a/b/", "recursive": True}))
    assert made.name == f"{parent}/folders/a/b/"
    assert raw.upload(srv.url, b, "a/b/obj", b"payload").status == 200
    assert arun(_call(srv.url, "list_folders", parent=parent)) == [f"{parent}/folders/a/", f"{parent}/folders/a/b/"]
    got = arun(_call(srv.url, "get_folder", name=f"{parent}/folders/a/b/"))
    assert got.metageneration == 1
    with pytest.raises(exceptions.AlreadyExists, match=f"already exists: {b}/a/b/"):
        arun(_call(srv.url, "create_folder", parent=parent, folder_id="a/b/"))
    with pytest.raises(exceptions.FailedPrecondition, match=f"not empty: {b}/a/"):
        arun(_call(srv.url, "delete_folder", name=f"{parent}/folders/a/"))

    renamed, op = arun(_call(srv.url, "rename_folder", name=f"{parent}/folders/a/", destination_folder_id="c/"))
    assert renamed.name == f"{parent}/folders/c/" and op.operation.done  # done at once, no latency set
    assert arun(_call(srv.url, "list_folders", parent=parent)) == [f"{parent}/folders/c/", f"{parent}/folders/c/b/"]
    assert raw.request(srv.url, "GET", raw.obj_path(b, "c/b/obj"), params={"alt": "media"}).body == b"payload"
    assert raw.request(srv.url, "GET", raw.obj_path(b, "a/b/obj")).status == 404
    # the JSON API sees the same folders
    assert [f["name"] for f in raw.request(srv.url, "GET", f"/storage/v1/b/{b}/folders").json()["items"]] == \
        ["c/", "c/b/"]

    assert raw.request(srv.url, "DELETE", raw.obj_path(b, "c/b/obj")).status == 204
    arun(_call(srv.url, "delete_folder", name=f"{parent}/folders/c/b/"))
    with pytest.raises(exceptions.NotFound, match=f"folder does not exist: {b}/c/b/"):
        arun(_call(srv.url, "get_folder", name=f"{parent}/folders/c/b/"))


def test_rename_with_latency_is_polled_until_done(srv):
    b = make_bucket(srv.url)
    parent = f"projects/_/buckets/{b}"
    arun(_call(srv.url, "create_folder", parent=parent, folder_id="src/"))
    srv.configure(latency_ms=300)
    srv.reset_stats()
    renamed, op = arun(_call(srv.url, "rename_folder", name=f"{parent}/folders/src/", destination_folder_id="dst/"))
    assert renamed.name == f"{parent}/folders/dst/"
    assert srv.stats()["requests"]["folder"] >= 2  # the rename, then at least one GetOperation poll


def test_folder_calls_on_a_bucket_without_hierarchical_namespace_are_refused(srv):
    b = make_bucket(srv.url, location="US")
    with pytest.raises(exceptions.InvalidArgument, match=f"does not have hierarchical namespace enabled: {b}"):
        arun(_call(srv.url, "create_folder", parent=f"projects/_/buckets/{b}", folder_id="x/"))


def test_list_folders_pages_and_prefix(srv):
    b = make_bucket(srv.url)
    parent = f"projects/_/buckets/{b}"
    for name in ("a/", "b/", "b/c/", "bb/", "c/"):
        arun(_call(srv.url, "create_folder", parent=parent, folder_id=name))
    pages = arun(_call(srv.url, "list_folders", request={"parent": parent, "page_size": 2, "prefix": "b"}))
    assert pages == [f"{parent}/folders/{n}" for n in ("b/", "b/c/", "bb/")]

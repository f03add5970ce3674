"""Object versioning on the wire (the order of one name's generations in a listing is not
specified: fake-gcs-server lists the live one first): a bucket with versioning.enabled keeps noncurrent generations,
``versions=true`` lists them, ``generation=`` reads and deletes one."""
from __future__ import annotations

from tests.conftest import new_bucket_name

from .wire import assert_gcs_error


def _versioned_bucket(wire) -> str:
    name = new_bucket_name()
    r = wire.request("POST", "/storage/v1/b", params={"project": "test"},
                     json={"name": name, "versioning": {"enabled": True}})
    assert r.status == 200, r
    assert r.json().get("versioning") == {"enabled": True}, r
    return name


def test_bucket_versioning_field_create_and_patch(wire, any_bucket):
    name = _versioned_bucket(wire)
    assert wire.request("GET", f"/storage/v1/b/{name}").json()["versioning"] == {"enabled": True}
    r = wire.request("PATCH", f"/storage/v1/b/{any_bucket}", json={"versioning": {"enabled": True}})
    assert r.status == 200, r
    assert wire.request("GET", f"/storage/v1/b/{any_bucket}").json()["versioning"] == {"enabled": True}


def test_overwrite_and_delete_keep_noncurrent_generations(wire):
    b = _versioned_bucket(wire)
    g1 = wire.put(b, "a", b"one")["generation"]
    g2 = wire.put(b, "a", b"two")["generation"]
    wire.put(b, "z", b"other")
    # Plain listings and reads see the live generation only.
    gz = wire.get_meta(b, "z").json()["generation"]
    assert [(i["name"], i["generation"]) for i in wire.list_all(b)[0]] == [("a", g2), ("z", gz)]
    assert wire.get_media(b, "a").body == b"two"
    # The older generation is still readable by number.
    assert wire.get_media(b, "a", generation=g1).body == b"one"
    old = wire.get_meta(b, "a", generation=g1).json()
    assert old["generation"] == g1 and old["size"] == "3"
    assert "timeDeleted" in old
    assert "timeDeleted" not in wire.get_meta(b, "a").json()
    items, _ = wire.list_all(b, versions="true", prefix="a")
    assert sorted((i["name"], i["generation"]) for i in items) == [("a", g1), ("a", g2)]
    # Deleting the live object keeps it as noncurrent; deleting a generation removes it for good.
    assert wire.delete(b, "a").status in (200, 204)
    assert_gcs_error(wire.get_meta(b, "a"), 404)
    assert wire.get_media(b, "a", generation=g2).body == b"two"
    assert sorted(i["generation"] for i in wire.list_all(b, versions="true", prefix="a")[0]) == [g1, g2]


def test_delete_by_generation_is_permanent(fwire):
    """fake-gcs-server answers 404 to deleting a noncurrent generation of a name with no live object."""
    b = _versioned_bucket(fwire)
    g1 = fwire.put(b, "a", b"one")["generation"]
    g2 = fwire.put(b, "a", b"two")["generation"]
    assert fwire.delete(b, "a").status == 204
    assert fwire.delete(b, "a", generation=g1).status == 204
    assert_gcs_error(fwire.get_meta(b, "a", generation=g1), 404)
    assert [i["generation"] for i in fwire.list_all(b, versions="true")[0]] == [g2]
    # Naming the live generation deletes it for good too: nothing noncurrent is left behind.
    g3 = fwire.put(b, "c", b"three")["generation"]
    assert fwire.delete(b, "c", generation=g3).status == 204
    assert [i["name"] for i in fwire.list_all(b, versions="true")[0]] == ["a"]
    assert_gcs_error(fwire.request("DELETE", f"/storage/v1/b/{b}"), 409)  # noncurrent objects keep it non-empty


def test_versions_listing_pages_inside_one_name(fwire):
    """A page may end between two generations of one name: the next page resumes there, nothing lost or repeated."""
    b = _versioned_bucket(fwire)
    gens = [fwire.put(b, "k", str(i).encode())["generation"] for i in range(5)]
    gens.append(fwire.put(b, "l", b"x")["generation"])
    items, pages = fwire.list_all(b, versions="true", maxResults=2)
    assert [i["generation"] for i in items] == gens
    assert len(pages) == 3
    items, _ = fwire.list_all(b, versions="true", delimiter="/", maxResults=2)
    assert len(items) == 6


def test_unversioned_bucket_drops_old_generation(wire, any_bucket):
    g1 = wire.put(any_bucket, "a", b"one")["generation"]
    wire.put(any_bucket, "a", b"two")
    assert_gcs_error(wire.get_meta(any_bucket, "a", generation=g1), 404)
    assert len(wire.list_all(any_bucket, versions="true")[0]) == 1

"""Object versioning through FluxFileSystem(version_aware=True), as gcsfs spells it: ``ls``/``find``
with ``versions=True`` list every generation as ``name#generation``; ``cat``, ``open``, ``info`` and
``rm`` of ``path#generation`` address that generation (batched reads included)."""
from __future__ import annotations

import pytest

from tests.conftest import make_fs, new_bucket_name


@pytest.fixture
def versioned(gcs_server):
    """(server, bucket with versioning enabled)."""
    name = new_bucket_name()
    fs = make_fs(gcs_server)
    fs.mkdir(name)
    fs.call_bucket = name
    r = fs.call("PATCH", "b/{}", name, json={"versioning": {"enabled": True}}, json_out=True)
    assert r.get("versioning") == {"enabled": True}
    return gcs_server, name


def _write_generations(fs, path, bodies):
    gens = []
    for body in bodies:
        fs.pipe_file(path, body)
        fs.invalidate_cache()
        gens.append(fs.info(path)["generation"])
    return gens


def test_versions_listed_and_read_by_generation(versioned):
    server, b = versioned
    fs = make_fs(server, version_aware=True)
    g = _write_generations(fs, f"{b}/d/a", [b"one", b"two", b"three"])
    fs.pipe_file(f"{b}/d/z", b"zz")
    fs.invalidate_cache()
    assert fs.cat(f"{b}/d/a") == b"three"
    assert fs.cat(f"{b}/d/a#{g[0]}") == b"one"
    with fs.open(f"{b}/d/a#{g[1]}", "rb") as f:
        assert f.read() == b"two"
    # Many paths at once (the batched reader) keep each named generation apart.
    many = fs.cat([f"{b}/d/a#{g[0]}", f"{b}/d/a#{g[1]}", f"{b}/d/a", f"{b}/d/z"])
    assert many == {f"{b}/d/a#{g[0]}": b"one", f"{b}/d/a#{g[1]}": b"two", f"{b}/d/a": b"three",
                    f"{b}/d/z": b"zz"}
    assert fs.info(f"{b}/d/a#{g[0]}")["size"] == 3
    want = sorted([f"{b}/d/a#{x}" for x in g] + [f"{b}/d/z#{fs.info(f'{b}/d/z')['generation']}"])
    assert sorted(fs.find(b, versions=True)) == want
    assert sorted(fs.find(f"{b}/d", versions=True, detail=True)) == want
    fresh = make_fs(server, version_aware=True)
    assert sorted(fresh.ls(f"{b}/d", versions=True)) == want
    # With the listing cache filled (live objects only), an older generation is still found by number.
    assert fs.ls(f"{b}/d") == [f"{b}/d/a", f"{b}/d/z"]
    assert fs.info(f"{b}/d/a#{g[0]}")["generation"] == g[0] and fs.exists(f"{b}/d/a#{g[1]}")
    assert not fs.exists(f"{b}/d/a#{int(g[0]) - 1}")
    # Plain listings are unchanged: live objects only.
    assert make_fs(server).find(b) == [f"{b}/d/a", f"{b}/d/z"]


def test_find_versions_pages_inside_one_name(flux_server):
    """The parallel lister keeps every generation when a page ends between two generations of a name."""
    b = new_bucket_name()
    flux_server.create_bucket(b)
    fs = make_fs(flux_server, version_aware=True, list_page_size=2, list_concurrency=4)
    fs.call("PATCH", "b/{}", b, json={"versioning": {"enabled": True}})
    gens = _write_generations(fs, f"{b}/k", [b"%d" % i for i in range(5)])
    _write_generations(fs, f"{b}/l", [b"x", b"y"])
    found = fs.find(b, versions=True)
    assert len(found) == len(set(found)) == 7
    assert [p for p in found if p.startswith(f"{b}/k#")] == [f"{b}/k#{x}" for x in gens]


def test_rm_of_a_generation(flux_server):
    b = new_bucket_name()
    flux_server.create_bucket(b)
    fs = make_fs(flux_server, version_aware=True)
    fs.call("PATCH", "b/{}", b, json={"versioning": {"enabled": True}})
    g = _write_generations(fs, f"{b}/a", [b"one", b"two"])
    fs.rm(f"{b}/a#{g[0]}")
    with pytest.raises(FileNotFoundError):
        fs.cat(f"{b}/a#{g[0]}")
    assert fs.cat(f"{b}/a") == b"two"
    fs.rm(f"{b}/a")  # the live object becomes noncurrent
    fs.invalidate_cache()
    assert not fs.exists(f"{b}/a")
    assert fs.cat(f"{b}/a#{g[1]}") == b"two"


def test_a_deleted_generation_is_named_in_the_error(flux_server):
    """Reading key#generation of a generation that is gone names that generation, not just the key
    (which exists: "No such object: key" alone would be wrong), on every read path."""
    b = new_bucket_name()
    flux_server.create_bucket(b)
    fs = make_fs(flux_server, version_aware=True)
    fs.call("PATCH", "b/{}", b, json={"versioning": {"enabled": True}})
    g = _write_generations(fs, f"{b}/a", [b"one", b"two"])
    fs.rm(f"{b}/a#{g[0]}")
    gone = f"{b}/a#{g[0]}"
    reads = {"cat": lambda: fs.cat(gone), "cat_file": lambda: fs.cat_file(gone),
             "range": lambda: fs.cat_file(gone, 0, 2), "many": lambda: fs.cat([gone, f"{b}/a"]),
             "open": lambda: fs.open(gone, "rb").read(), "info": lambda: fs.info(gone),
             "read_into": lambda: fs.read_into(gone, [(0, bytearray(2))])}
    for name, read in reads.items():
        with pytest.raises(FileNotFoundError, match=f"{b}/a#{g[0]}") as got:
            read()
        assert gone in str(got.value), name
    assert not fs.exists(gone) and fs.cat(f"{b}/a") == b"two"

"""--root DIR: everything survives a restart (objects, metadata, generations, composites, synthetic batches)."""
from __future__ import annotations

import json
import os

from fluxfs.server import run, synthetic_bytes

from .raw import list_all, obj_path, request, upload


def _state(url, bucket):
    names, _, _ = list_all(url, bucket)
    out = {}
    for n in names:
        meta = request(url, "GET", obj_path(bucket, n)).json()
        body = request(url, "GET", obj_path(bucket, n), params={"alt": "media"}).body
        out[n] = (meta["generation"], meta["metageneration"], meta.get("metadata"), meta["crc32c"],
                  meta.get("componentCount"), meta["contentType"], body)
    return out


def test_restart_keeps_everything(tmp_path):
    root = tmp_path / "store"
    odd = "dir/with space#?%\t\u00e9" + "x" * 900  # GCS forbids CR and LF in names; a tab is legal
    with run(root=str(root)) as srv:
        srv.create_bucket("keep")
        srv.create_bucket("empty-one")
        srv.generate("keep", 50, size=(1, 300), prefix="syn/", seed=3)
        assert upload(srv.url, "keep", odd, b"odd name", ).status == 200
        assert upload(srv.url, "keep", "syn/00000004", b"overwrote a synthetic").status == 200
        assert request(srv.url, "DELETE", obj_path("keep", "syn/00000005")).status == 204
        r = request(srv.url, "PATCH", obj_path("keep", "syn/00000006"), json.dumps({"metadata": {"k": "v"}}).encode(),
                    {"Content-Type": "application/json"})
        assert r.status == 200 and r.json()["metageneration"] == "2"
        body = {"sourceObjects": [{"name": "syn/00000001"}, {"name": odd}]}
        assert request(srv.url, "POST", obj_path("keep", "comp") + "/compose", json.dumps(body).encode()).status == 200
        upload(srv.url, "keep", "gone", b"deleted later")
        request(srv.url, "DELETE", obj_path("keep", "gone"))
        before = _state(srv.url, "keep")
        assert len(before) == 51  # 50 synthetic - 1 deleted + odd + comp
    with run(root=str(root)) as srv:
        after = _state(srv.url, "keep")
        assert after == before
        assert after["syn/00000004"][-1] == b"overwrote a synthetic"
        size = len(after["syn/00000007"][-1])
        assert after["syn/00000007"][-1] == synthetic_bytes("syn/00000007", size, 3)
        assert request(srv.url, "GET", "/storage/v1/b/empty-one").status == 200
        # Generations keep increasing after a restart.
        r = upload(srv.url, "keep", "new", b"n").json()
        assert int(r["generation"]) > max(int(v[0]) for v in after.values())
        # Regenerating over a persisted object replaces it, also across the next restart.
        srv.generate("keep", 6, size=10, prefix="syn/", seed=9)
    with run(root=str(root)) as srv:
        got = request(srv.url, "GET", obj_path("keep", "syn/00000004"), params={"alt": "media"}).body
        assert got == synthetic_bytes("syn/00000004", 10, 9)
        # syn/00000005 was deleted then regenerated: it is back.
        assert request(srv.url, "GET", obj_path("keep", "syn/00000005")).status == 200
        assert request(srv.url, "DELETE", "/storage/v1/b/empty-one").status == 204
    with run(root=str(root)) as srv:
        assert request(srv.url, "GET", "/storage/v1/b/empty-one").status == 404
    # No temporary files are left behind.
    leftovers = [f for _, _, files in os.walk(root) for f in files if f.startswith(".tmp-")]
    assert leftovers == []


def test_memory_default_forgets(tmp_path):
    with run() as srv:
        srv.create_bucket("mem")
        upload(srv.url, "mem", "a", b"1")
    with run() as srv:
        assert request(srv.url, "GET", "/storage/v1/b/mem").status == 404
    assert os.listdir(tmp_path) == []


_FIELDS = "generation,size,crc32c,md5Hash,timeDeleted,updated"


def test_restart_keeps_noncurrent_generations(tmp_path):
    """A versioned bucket under --root: its setting, noncurrent generations (bodies, timeDeleted) and
    generation deletes all survive a restart."""
    root = str(tmp_path / "store")
    with run(root=root) as srv:
        body = json.dumps({"name": "ver", "versioning": {"enabled": True}}).encode()
        r = request(srv.url, "POST", "/storage/v1/b", body, {"Content-Type": "application/json"})
        assert r.status == 200
        gens = [upload(srv.url, "ver", "a", body).json()["generation"] for body in (b"one", b"two", b"three")]
        assert request(srv.url, "DELETE", obj_path("ver", "a"), params={"generation": gens[1]}).status == 204
        assert request(srv.url, "DELETE", obj_path("ver", "a")).status == 204  # live -> noncurrent
        before = request(srv.url, "GET", obj_path("ver", "a"), params={"generation": gens[0], "fields": _FIELDS}).json()
    with run(root=root) as srv:
        assert request(srv.url, "GET", "/storage/v1/b/ver").json()["versioning"] == {"enabled": True}
        items = request(srv.url, "GET", "/storage/v1/b/ver/o", params={"versions": "true"}).json()["items"]
        assert [i["generation"] for i in items] == [gens[0], gens[2]]
        assert all("timeDeleted" in i for i in items)
        got = request(srv.url, "GET", obj_path("ver", "a"), params={"generation": gens[0], "fields": _FIELDS})
        assert got.json() == before
        for g, body in ((gens[0], b"one"), (gens[2], b"three")):
            got = request(srv.url, "GET", obj_path("ver", "a"), params={"generation": g, "alt": "media"})
            assert got.body == body
        assert request(srv.url, "GET", obj_path("ver", "a")).status == 404
        assert request(srv.url, "GET", obj_path("ver", "a"), params={"generation": gens[1]}).status == 404

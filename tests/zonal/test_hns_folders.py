"""HNS buckets (zonal or not) as gcsfs's ExtendedGcsFileSystem handles them, over the JSON folders API of the
embedded server: mkdir/rmdir of folders, mv of a folder as one atomic rename, empty folders in ls/info/find,
flat buckets unchanged, the parallel lister unaffected."""
from __future__ import annotations

import errno
import os

import pytest

from fluxfs.errors import FolderRenameTimeout
from fluxfs.server import run
from tests.conftest import make_fs, new_bucket_name


@pytest.fixture
def hns_bucket(flux_server) -> str:
    name = new_bucket_name()
    make_fs(flux_server, zonal_transport="http").mkdir(name, enable_hierarchical_namespace=True)
    return name


def test_mkdir_makes_an_empty_folder_ls_shows_and_rmdir_removes(flux_server, hns_bucket):
    fs = make_fs(flux_server, zonal_transport="http")
    fs.pipe(f"{hns_bucket}/keep", b"k")
    fs.ls(hns_bucket)  # cached listing: mkdir must add to it
    fs.mkdir(f"{hns_bucket}/empty")
    assert fs.ls(hns_bucket, detail=False) == [f"{hns_bucket}/empty", f"{hns_bucket}/keep"]
    other = make_fs(flux_server, zonal_transport="http")  # a cold cache: the server's listing shows it too
    listed = {e["name"]: e["type"] for e in other.ls(hns_bucket, detail=True)}
    assert listed == {f"{hns_bucket}/empty": "directory", f"{hns_bucket}/keep": "file"}
    assert other.info(f"{hns_bucket}/empty")["type"] == "directory" and other.isdir(f"{hns_bucket}/empty")
    assert other.ls(f"{hns_bucket}/empty") == []
    fs.rmdir(f"{hns_bucket}/empty")
    assert fs.ls(hns_bucket, detail=False) == [f"{hns_bucket}/keep"]
    assert make_fs(flux_server, zonal_transport="http").ls(hns_bucket, detail=False) == [f"{hns_bucket}/keep"]
    with pytest.raises(FileNotFoundError, match="empty"):
        make_fs(flux_server, zonal_transport="http").info(f"{hns_bucket}/empty")


def test_mkdir_needs_the_parent_unless_create_parents(flux_server, hns_bucket):
    fs = make_fs(flux_server, zonal_transport="http")
    with pytest.raises(FileNotFoundError, match=f"mkdir {hns_bucket}/a/b: the parent folder does not exist"):
        fs.mkdir(f"{hns_bucket}/a/b")
    fs.mkdir(f"{hns_bucket}/a/b", create_parents=True)
    fs.makedirs(f"{hns_bucket}/x/y/z", exist_ok=True)
    got = make_fs(flux_server, zonal_transport="http").find(hns_bucket, withdirs=True)
    assert got == [f"{hns_bucket}/{k}" for k in ("a", "a/b", "x", "x/y", "x/y/z")]
    with pytest.raises(FileExistsError, match=f"{hns_bucket}/x/y/z"):
        fs.makedirs(f"{hns_bucket}/x/y/z")


def test_mkdir_over_a_file_refused(flux_server, hns_bucket):
    fs = make_fs(flux_server, zonal_transport="http")
    fs.pipe(f"{hns_bucket}/f", b"data")
    with pytest.raises(FileExistsError, match=f"mkdir {hns_bucket}/f: a file already exists"):
        fs.mkdir(f"{hns_bucket}/f")
    assert fs.cat(f"{hns_bucket}/f") == b"data"


def test_rmdir_of_a_non_empty_folder_refused_naming_it(flux_server, hns_bucket):
    fs = make_fs(flux_server, zonal_transport="http")
    fs.pipe(f"{hns_bucket}/full/obj", b"x")
    fs.mkdir(f"{hns_bucket}/outer/inner", create_parents=True)
    for folder in ("full", "outer"):  # an object, or an (empty) folder, below it
        with pytest.raises(OSError, match=f"folder is not empty.*{hns_bucket}/{folder}/") as err:
            fs.rmdir(f"{hns_bucket}/{folder}")
        assert err.value.errno == errno.ENOTEMPTY
    assert fs.cat(f"{hns_bucket}/full/obj") == b"x"
    assert make_fs(flux_server, zonal_transport="http").find(hns_bucket, withdirs=True) == [
        f"{hns_bucket}/{k}" for k in ("full", "full/obj", "outer", "outer/inner")]
    with pytest.raises(FileNotFoundError, match=f"rmdir {hns_bucket}/nothing: no such folder"):
        fs.rmdir(f"{hns_bucket}/nothing")


def test_mv_of_a_folder_is_one_rename(flux_server, hns_bucket):
    fs = make_fs(flux_server, zonal_transport="http")
    data = {f"{hns_bucket}/src/sub{i % 3}/k{i:02d}": os.urandom(50 + i) for i in range(50)}
    fs.pipe(data)
    fs.mkdir(f"{hns_bucket}/src/empty")
    fs.find(hns_bucket, withdirs=True)  # warm cache: the source is known to be a directory
    flux_server.reset_stats()
    fs.mv(f"{hns_bucket}/src", f"{hns_bucket}/dst")
    assert flux_server.stats()["requests"] == {"folder": 1}  # one rename: no copies, no deletes
    fresh = make_fs(flux_server, zonal_transport="http")
    moved = {n.replace("/dst/", "/src/", 1): b for n, b in fresh.cat(fresh.find(f"{hns_bucket}/dst")).items()}
    assert moved == data
    assert fresh.find(f"{hns_bucket}/src", withdirs=True) == []
    assert not fresh.exists(f"{hns_bucket}/src")
    assert fresh.isdir(f"{hns_bucket}/dst/empty") and fs.isdir(f"{hns_bucket}/dst/empty")
    assert fs.ls(hns_bucket, detail=False) == [f"{hns_bucket}/dst"]  # the cache followed the rename


def test_mv_of_a_folder_from_a_cold_cache_moves_no_object_itself(flux_server, hns_bucket):
    fs = make_fs(flux_server, zonal_transport="http")
    fs.pipe({f"{hns_bucket}/a/k{i}": b"v%d" % i for i in range(5)})
    cold = make_fs(flux_server, zonal_transport="http")
    flux_server.reset_stats()
    cold.mv(f"{hns_bucket}/a", f"{hns_bucket}/b")
    requests = flux_server.stats()["requests"]
    assert not {"write", "copy", "delete", "compose"} & set(requests)
    assert make_fs(flux_server, zonal_transport="http").find(hns_bucket) == [f"{hns_bucket}/b/k{i}" for i in range(5)]


def test_mv_onto_an_existing_folder_refused_nothing_moved(flux_server, hns_bucket):
    fs = make_fs(flux_server, zonal_transport="http")
    fs.pipe({f"{hns_bucket}/a/k": b"1", f"{hns_bucket}/b/k": b"2"})
    with pytest.raises(FileExistsError, match=f"{hns_bucket}/b/"):
        fs.mv(f"{hns_bucket}/a", f"{hns_bucket}/b")
    fresh = make_fs(flux_server, zonal_transport="http")
    assert fresh.cat([f"{hns_bucket}/a/k", f"{hns_bucket}/b/k"]) == {f"{hns_bucket}/a/k": b"1",
                                                                      f"{hns_bucket}/b/k": b"2"}


def test_mv_of_a_file_on_an_hns_bucket_still_moves_it(flux_server, hns_bucket):
    fs = make_fs(flux_server, zonal_transport="http")
    fs.pipe(f"{hns_bucket}/d/f", b"bytes")
    fs.mv(f"{hns_bucket}/d/f", f"{hns_bucket}/d/g")
    assert make_fs(flux_server, zonal_transport="http").find(hns_bucket) == [f"{hns_bucket}/d/g"]
    assert fs.cat(f"{hns_bucket}/d/g") == b"bytes"


def test_find_withdirs_includes_empty_folders(flux_server, hns_bucket):
    fs = make_fs(flux_server, zonal_transport="http")
    fs.pipe(f"{hns_bucket}/d/f", b"1")
    fs.mkdir(f"{hns_bucket}/d/e1/e2", create_parents=True)
    fs.mkdir(f"{hns_bucket}/top")
    b = hns_bucket
    assert fs.find(b, withdirs=True) == [f"{b}/d", f"{b}/d/e1", f"{b}/d/e1/e2", f"{b}/d/f", f"{b}/top"]
    assert fs.find(b) == [f"{b}/d/f"]
    assert fs.find(b, withdirs=True, maxdepth=2) == [f"{b}/d", f"{b}/d/e1", f"{b}/d/f", f"{b}/top"]
    assert fs.find(f"{b}/d", withdirs=True) == [f"{b}/d", f"{b}/d/e1", f"{b}/d/e1/e2", f"{b}/d/f"]  # as on flat
    assert fs.find(f"{b}/d/e1/e2", withdirs=True) == [f"{b}/d/e1/e2"]  # gcsfs lists the empty folder itself
    detail = fs.find(b, withdirs=True, detail=True)
    assert detail[f"{b}/d/e1/e2"]["type"] == "directory" and detail[f"{b}/d/f"]["size"] == 1
    # the dircache that find filled shows the empty folders to ls, as gcsfs's does
    assert fs.ls(f"{b}/d", detail=False) == [f"{b}/d/e1", f"{b}/d/f"]
    assert fs.ls(f"{b}/d/e1", detail=False) == [f"{b}/d/e1/e2"]


def test_flat_bucket_unchanged(flux_server, bucket):
    fs = make_fs(flux_server, zonal_transport="http")
    flux_server.reset_stats()
    fs.mkdir(f"{bucket}/sub/dir")  # gcsfs: nothing (GCS has no directories)
    fs.makedirs(f"{bucket}/other", exist_ok=True)
    assert fs.ls(bucket) == [] and make_fs(flux_server, zonal_transport="http").find(bucket, withdirs=True) == []
    requests = flux_server.stats()["requests"]
    assert "folder" not in requests
    fs.pipe(f"{bucket}/d/f", b"x")
    fs.rmdir(f"{bucket}/d")  # a path below a flat bucket: nothing, as gcsfs
    fs.mv(f"{bucket}/d", f"{bucket}/e", recursive=True)  # copies and deletes
    assert make_fs(flux_server, zonal_transport="http").find(bucket) == [f"{bucket}/e/f"]
    assert "folder" not in flux_server.stats()["requests"]


def test_parallel_lister_lists_everything_on_an_hns_bucket(flux_server, hns_bucket):
    fs = make_fs(flux_server, list_concurrency=8)
    names = {f"{hns_bucket}/p{i % 7}/q{i % 3}/o{i:04d}" for i in range(700)}
    fs.pipe({n: b"" for n in names})
    fs.mkdir(f"{hns_bucket}/p0/lonely")
    got = [o["name"] for batch in fs.iter_objects(hns_bucket, page_size=50) for o in batch]
    assert sorted(got) == sorted(names)
    found = make_fs(flux_server, list_concurrency=8).find(hns_bucket, withdirs=True)
    dirs = {f"{hns_bucket}/p{i}" for i in range(7)} | {f"{hns_bucket}/p{i}/q{j}" for i in range(7) for j in range(3)}
    assert found == sorted(names | dirs | {f"{hns_bucket}/p0/lonely"})


def test_folder_calls_on_a_flat_bucket_answer_400(flux_server, bucket):
    # declared wrongly: the server says no
    fs = make_fs(flux_server, zonal_transport="http", bucket_types={bucket: "hns"})
    with pytest.raises(OSError, match=f"400.*hierarchical namespace not enabled.*{bucket}|"
                                      f"400.*does not have hierarchical namespace enabled: {bucket}"):
        fs.mkdir(f"{bucket}/x")
    fs.pipe(f"{bucket}/d/f", b"1")
    assert fs.find(bucket, withdirs=True) == [f"{bucket}/d", f"{bucket}/d/f"]  # the files, all of them


def test_folders_survive_a_restart(tmp_path):
    root = str(tmp_path / "store")
    name = new_bucket_name()
    with run(root=root) as srv:
        fs = make_fs(srv)
        fs.mkdir(name, enable_hierarchical_namespace=True)
        fs.mkdir(f"{name}/empty")
        fs.pipe(f"{name}/a/f", b"data")
        fs.mv(f"{name}/a", f"{name}/b")
    with run(root=root) as srv:
        fs = make_fs(srv)
        assert fs.find(name, withdirs=True) == [f"{name}/b", f"{name}/b/f", f"{name}/empty"]
        assert fs.cat(f"{name}/b/f") == b"data"


def test_mv_waits_for_the_rename_operation(flux_server, hns_bucket):
    fs = make_fs(flux_server, zonal_transport="http")
    fs.pipe({f"{hns_bucket}/a/k{i}": b"%d" % i for i in range(3)})
    fs.find(hns_bucket)
    flux_server.configure(latency_ms=300)  # the operation is reported done 0.3 s after the rename
    try:
        flux_server.reset_stats()
        fs.mv(f"{hns_bucket}/a", f"{hns_bucket}/b")
        assert flux_server.stats()["requests"]["folder"] >= 2  # the rename, then polls of its operation
    finally:
        flux_server.configure(latency_ms=0)
    http = make_fs(flux_server, zonal_transport="http")
    assert http.cat(fs.find(f"{hns_bucket}/b")) == {f"{hns_bucket}/b/k{i}": b"%d" % i for i in range(3)}


def test_mv_gives_up_waiting_after_the_deadline_naming_both_folders(flux_server, hns_bucket, monkeypatch):
    from fluxfs.zonal import folders

    fs = make_fs(flux_server, zonal_transport="http")
    fs.pipe(f"{hns_bucket}/a/k", b"1")
    monkeypatch.setattr(folders, "RENAME_DEADLINE", 0.0)
    flux_server.configure(latency_ms=300)  # the operation answered not done yet
    try:
        with pytest.raises(FolderRenameTimeout,
                           match=f"rename {hns_bucket}/a/ -> {hns_bucket}/b/: operation .* not done after 0 s"):
            fs.mv(f"{hns_bucket}/a", f"{hns_bucket}/b")
    finally:
        flux_server.configure(latency_ms=0)
    assert fs.find(hns_bucket) == [f"{hns_bucket}/b/k"]  # the server did it; the cache does not say otherwise


def test_rm_recursive_deletes_the_folders_too(flux_server, hns_bucket):
    fs = make_fs(flux_server, zonal_transport="http")
    fs.pipe({f"{hns_bucket}/d/sub/k": b"1", f"{hns_bucket}/keep/k": b"2"})
    fs.mkdir(f"{hns_bucket}/d/empty/deeper", create_parents=True)
    fs.rm(f"{hns_bucket}/d", recursive=True)
    assert fs.ls(hns_bucket, detail=False) == [f"{hns_bucket}/keep"]
    got = make_fs(flux_server, zonal_transport="http").find(hns_bucket, withdirs=True)
    assert got == [f"{hns_bucket}/keep", f"{hns_bucket}/keep/k"]
    fs.mkdir(f"{hns_bucket}/only-empty")
    fs.rm(f"{hns_bucket}/only-empty", recursive=True)  # nothing but folders: still removed, no error
    assert not make_fs(flux_server, zonal_transport="http").exists(f"{hns_bucket}/only-empty")
    with pytest.raises(FileNotFoundError):
        fs.rm(f"{hns_bucket}/never", recursive=True)


def test_zonal_bucket_has_folders_too(flux_server):
    name = new_bucket_name()
    fs = make_fs(flux_server, zonal_transport="http")
    fs.mkdir(name, placement="us-central1-a", location="us-central1")
    fs.pipe(f"{name}/a/k", b"zonal")
    fs.mkdir(f"{name}/empty")
    fs.mv(f"{name}/a", f"{name}/b")
    fresh = make_fs(flux_server, zonal_transport="http")
    assert fresh.find(name, withdirs=True) == [f"{name}/b", f"{name}/b/k", f"{name}/empty"]
    assert fresh.cat(f"{name}/b/k") == b"zonal"


def test_mv_of_a_folder_to_another_bucket_leaves_no_empty_folders_behind(flux_server, hns_bucket, bucket):
    fs = make_fs(flux_server)
    data = {f"{hns_bucket}/d/x": b"1", f"{hns_bucket}/d/b/y": b"22", f"{hns_bucket}/d/b/c/z": b"333"}
    fs.pipe(data)
    fs.mkdir(f"{hns_bucket}/d/empty")
    fs.pipe(f"{hns_bucket}/keep/k", b"k")
    fs.mv(f"{hns_bucket}/d", f"{bucket}/d", recursive=True)
    fresh = make_fs(flux_server)
    assert fresh.cat(f"{bucket}/d", recursive=True) == {p.replace(hns_bucket, bucket): v for p, v in data.items()}
    # the source directory is gone, folders included (gcsfs leaves them); the folder beside it is kept
    assert fresh.find(hns_bucket, withdirs=True) == [f"{hns_bucket}/keep", f"{hns_bucket}/keep/k"]
    assert not fresh.exists(f"{hns_bucket}/d")


def test_mv_of_a_folder_into_another_hns_bucket_keeps_its_empty_folders(flux_server, hns_bucket):
    fs = make_fs(flux_server)
    other = new_bucket_name()
    fs.mkdir(other, placement="us-central1-a", location="us-central1")  # zonal: HNS, and no rewrite
    fs.mkdir(f"{other}/into")
    fs.pipe(f"{hns_bucket}/d/b/y", b"22")
    fs.makedirs(f"{hns_bucket}/d/empty/deeper")
    fs.mv(f"{hns_bucket}/d", f"{other}/into", recursive=True)  # an existing directory: moved inside it
    fresh = make_fs(flux_server)
    assert fresh.find(other, withdirs=True) == [f"{other}/into", f"{other}/into/d", f"{other}/into/d/b",
                                                f"{other}/into/d/b/y", f"{other}/into/d/empty",
                                                f"{other}/into/d/empty/deeper"]
    assert fresh.cat(f"{other}/into/d/b/y") == b"22"
    assert fresh.find(hns_bucket, withdirs=True) == []


def test_rm_of_a_glob_recursive_deletes_the_matched_folders(flux_server, hns_bucket):
    fs = make_fs(flux_server)
    fs.pipe({f"{hns_bucket}/a/x": b"1", f"{hns_bucket}/a/b/y": b"2", f"{hns_bucket}/keep/k": b"3"})
    fs.makedirs(f"{hns_bucket}/a/e/f")
    fs.rm(f"{hns_bucket}/a/*", recursive=True)
    assert make_fs(flux_server).find(hns_bucket, withdirs=True) == [f"{hns_bucket}/a", f"{hns_bucket}/keep",
                                                                     f"{hns_bucket}/keep/k"]


def test_rm_of_a_folder_alone_deletes_it_when_empty(flux_server, hns_bucket):
    fs = make_fs(flux_server)
    fs.mkdir(f"{hns_bucket}/empty")
    fs.pipe(f"{hns_bucket}/full/k", b"1")
    fs.rm(f"{hns_bucket}/empty")  # gcsfs's ExtendedGcsFileSystem deletes it too
    assert not make_fs(flux_server).exists(f"{hns_bucket}/empty")
    with pytest.raises(OSError) as err:
        fs.rm(f"{hns_bucket}/full")
    assert err.value.errno == errno.ENOTEMPTY and f"{hns_bucket}/full" in str(err.value)
    assert make_fs(flux_server).cat(f"{hns_bucket}/full/k") == b"1"
    with pytest.raises(FileNotFoundError):
        fs.rm(f"{hns_bucket}/never")


def test_mv_of_a_glob_recursive_moves_empty_folders_too(flux_server, hns_bucket):
    fs = make_fs(flux_server)
    fs.pipe({f"{hns_bucket}/q/x": b"1", f"{hns_bucket}/q/s/y": b"2"})
    fs.makedirs(f"{hns_bucket}/q/e")
    fs.mv(f"{hns_bucket}/q/*", f"{hns_bucket}/q3/", recursive=True)  # gcsfs: FileNotFoundError on q/e, half moved
    assert make_fs(flux_server).find(hns_bucket, withdirs=True) == [
        f"{hns_bucket}/q", f"{hns_bucket}/q3", f"{hns_bucket}/q3/e", f"{hns_bucket}/q3/s", f"{hns_bucket}/q3/s/y",
        f"{hns_bucket}/q3/x"]
    assert make_fs(flux_server).cat(f"{hns_bucket}/q3/s/y") == b"2"

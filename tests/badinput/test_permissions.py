"""Bad-input catalogue: permission denied (HTTP 403) on list, compose and delete (docs/bad-inputs.md)."""
from __future__ import annotations

import warnings

import pytest

from fluxfs import temporaries
from fluxfs.server.synthetic import synthetic_bytes
from tests.conftest import make_fs

from .conftest import assert_nothing_left


def test_listing_denied(fs, flux_server, bucket):
    flux_server.generate(bucket, 10, size=10, prefix="p/")
    flux_server.configure(deny_ops={"list"})
    with pytest.raises(PermissionError, match=rf"Permission denied \(HTTP 403\) for {bucket}/p/: "
                                              r"The caller does not have permission for 'list' operations"):
        fs.find(f"{bucket}/p")


def test_dataset_listing_denied(flux_server, bucket, storage_options):
    from fluxfs.pipes import FluxIterableDataset

    flux_server.generate(bucket, 10, size=10, prefix="p/")
    flux_server.configure(deny_ops={"list"})
    with pytest.raises(PermissionError, match=rf"Permission denied \(HTTP 403\) for {bucket}/p/"):
        FluxIterableDataset.from_prefix(f"flux://{bucket}/p/", storage_options=storage_options)


def test_compose_denied_falls_back_to_direct_reads(fs, flux_server, bucket):
    flux_server.generate(bucket, 100, size=(1, 300), prefix="c/")
    infos = [i for b in fs.iter_objects(f"{bucket}/c") for i in b]
    flux_server.configure(deny_ops={"compose"})
    with pytest.warns(RuntimeWarning, match=r"fluxfs: compose is not permitted \(Permission denied \(HTTP 403\).*\); "
                                            r"reading objects directly from now on"):
        got = fs.cat_objects(infos)
    assert got == {i["name"]: synthetic_bytes(i["name"].partition("/")[2], i["size"]) for i in infos}
    assert_nothing_left(flux_server, bucket)


def _read_with_delete_denied(flux_server, bucket):
    """Read 10 composite groups, one at a time, while deletes are denied; returns (fs, data, infos)."""
    flux_server.generate(bucket, 320, size=10, prefix="d/")
    fs = make_fs(flux_server, read_concurrency=1)
    infos = [i for b in fs.iter_objects(f"{bucket}/d") for i in b]
    flux_server.configure(deny_ops={"delete"})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = fs.cat_objects(infos)
    assert got == {i["name"]: synthetic_bytes(i["name"].partition("/")[2], 10) for i in infos}
    return fs, caught


def test_delete_denied_stops_composing(flux_server, bucket):
    fs, caught = _read_with_delete_denied(flux_server, bucket)
    try:
        # The first composite that cannot be deleted must turn compose off for this filesystem (as a
        # denied compose does) and say so: composing the other 9 groups would strand 9 more objects.
        # (At most read_concurrency + 1 = 2: the next group may be composing while the 403 comes back.)
        assert len(flux_server.list_names(bucket, "_fluxfs-tmp/")) <= 2
        assert any("compose is not permitted" in str(w.message) for w in caught)
    finally:
        flux_server.configure(deny_ops=[])
        temporaries.cleanup(fs, f"flux://{bucket}")


@pytest.mark.xfail(strict=True, reason="missing feature: compose reads cannot learn that delete is denied before "
                                        "creating a composite (the server's testIamPermissions ignores deny_ops and "
                                        "compose_reads does not ask), so the first composite is stranded")
def test_delete_denied_leaves_no_temporary(flux_server, bucket):
    fs, _ = _read_with_delete_denied(flux_server, bucket)
    try:
        assert flux_server.list_names(bucket, "_fluxfs-tmp/") == []
    finally:
        flux_server.configure(deny_ops=[])
        temporaries.cleanup(fs, f"flux://{bucket}")


def test_rm_denied(fs, flux_server, bucket):
    fs.pipe(f"{bucket}/keep", b"precious")
    flux_server.configure(deny_ops={"delete"})
    with pytest.raises(PermissionError, match=rf"Permission denied \(HTTP 403\) for {bucket}/keep"):
        fs.rm(f"{bucket}/keep")
    flux_server.configure(deny_ops=[])
    assert fs.cat_file(f"{bucket}/keep") == b"precious"


def test_write_denied_leaves_nothing(flux_server, bucket):
    fs = make_fs(flux_server, multipart="compose", part_size=2**16)
    flux_server.configure(deny_ops={"compose"})
    with pytest.raises(PermissionError, match=rf"Permission denied \(HTTP 403\) for {bucket}/"):
        with fs.open(f"{bucket}/big.bin", "wb") as f:
            f.write(b"z" * 300_000)
    flux_server.configure(deny_ops=[])
    assert flux_server.list_names(bucket) == []
    assert_nothing_left(flux_server, bucket)


# Calls fluxfs implements and calls inherited from gcsfs (info, exists, ls, cp, mv, setxattrs, get_file)
# raise the same exception type for a denied object, naming it.
DENIED_CALLS = {
    "info": lambda fs, b: fs.info(f"{b}/obj"),
    "exists": lambda fs, b: fs.exists(f"{b}/obj"),
    "ls": lambda fs, b: fs.ls(b),
    "find": lambda fs, b: fs.find(b),
    "rm": lambda fs, b: fs.rm(f"{b}/obj"),
    "cp": lambda fs, b: fs.cp(f"{b}/obj", f"{b}/copy"),
    "mv": lambda fs, b: fs.mv(f"{b}/obj", f"{b}/moved"),
    "cat": lambda fs, b: fs.cat(f"{b}/obj"),
    "open": lambda fs, b: fs.open(f"{b}/obj").read(),
    "setxattrs": lambda fs, b: fs.setxattrs(f"{b}/obj", owner="me"),
    "get_file": lambda fs, b, tmp: fs.get_file(f"{b}/obj", str(tmp / "obj")),
}


@pytest.mark.parametrize("call", sorted(DENIED_CALLS))
def test_denied_object_is_a_permission_error_from_every_call(flux_server, bucket, call, tmp_path):
    fs = make_fs(flux_server)
    fs.pipe(f"{bucket}/obj", b"precious")
    fs.invalidate_cache()
    flux_server.configure(deny_ops={"read", "list", "copy", "delete", "metadata"})
    fn = DENIED_CALLS[call]
    with pytest.raises(PermissionError, match=rf"Permission denied \(HTTP 403\) for {bucket}(/obj)?\b.*: "
                                              r"The caller does not have permission for '\w+' operations"):
        fn(fs, bucket, tmp_path) if call == "get_file" else fn(fs, bucket)
    flux_server.configure(deny_ops=[])
    assert fs.cat_file(f"{bucket}/obj") == b"precious" and fs.ls(bucket, detail=False) == [f"{bucket}/obj"]
    assert not (tmp_path / "obj").exists()


@pytest.mark.parametrize("call", ["info", "ls", "cp", "cat"])
def test_unauthenticated_is_a_permission_error_from_every_call(flux_server, bucket, call):
    fs = make_fs(flux_server)
    fs.pipe(f"{bucket}/obj", b"precious")
    fs.invalidate_cache()
    flux_server.configure(require_token="not-the-callers")
    try:
        with pytest.raises(PermissionError, match=rf"Permission denied \(HTTP 401\) for {bucket}(/obj)?\b.*: "
                                                  r"Anonymous caller does not have storage access"):
            DENIED_CALLS[call](fs, bucket)
    finally:
        flux_server.configure(require_token=None)


def test_failed_precondition_of_a_gcsfs_call_is_precondition_failed(fs, bucket):
    from fluxfs.errors import PreconditionFailed

    fs.pipe(f"{bucket}/obj", b"v1")
    with pytest.raises(PreconditionFailed, match=rf"HTTP 412: {bucket}/obj\b"):
        fs.call("GET", "b/{}/o/{}", bucket, "obj", json_out=True, ifGenerationMatch=1)

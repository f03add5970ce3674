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

"""Bad-input catalogue: missing buckets and objects, empty prefixes, a prefix that is a file (docs/bad-inputs.md)."""
from __future__ import annotations

import pytest

from tests.conftest import make_fs

from .conftest import assert_nothing_left

NO_BUCKET = "no-such-bucket-9f3a"


def test_listing_a_missing_bucket(fs):
    with pytest.raises(FileNotFoundError,
                       match=f"No such object or bucket: {NO_BUCKET}: The specified bucket does not exist"):
        fs.find(NO_BUCKET)


def test_reading_from_a_missing_bucket(fs):
    with pytest.raises(FileNotFoundError,
                       match=f"No such object or bucket: {NO_BUCKET}/k: The specified bucket does not exist"):
        fs.cat_file(f"{NO_BUCKET}/k")


def test_dataset_over_a_missing_bucket(storage_options):
    from fluxfs.pipes import FluxIterableDataset

    with pytest.raises(FileNotFoundError,
                       match=f"No such object or bucket: {NO_BUCKET}/train/: The specified bucket does not exist"):
        FluxIterableDataset.from_prefix(f"flux://{NO_BUCKET}/train/", storage_options=storage_options)


@pytest.mark.parametrize("multipart", ["xml", "compose"])
def test_write_to_a_missing_bucket(flux_server, multipart):
    fs = make_fs(flux_server, multipart=multipart, part_size=5 * 2**20 if multipart == "xml" else 2**16)
    with pytest.raises(FileNotFoundError,
                       match=f"No such object or bucket: {NO_BUCKET}/model.pt: The specified bucket does not exist"):
        with fs.open(f"{NO_BUCKET}/model.pt", "wb") as f:
            f.write(b"x" * 300_000)  # several compose parts: the first one already fails


@pytest.mark.parametrize("size", [10, 300_000], ids=["small", "parts"])
def test_append_to_a_missing_bucket(flux_server, size):
    fs = make_fs(flux_server, multipart="compose", part_size=2**16)
    with pytest.raises(FileNotFoundError,
                       match=f"^No such object or bucket: {NO_BUCKET}/log.txt: The specified bucket does not exist"):
        with fs.open(f"{NO_BUCKET}/log.txt", "ab") as f:
            f.write(b"x" * size)  # "parts": the first part already fails, inside write()


def test_reading_a_missing_object(fs, bucket):
    with pytest.raises(FileNotFoundError, match=f"No such object or bucket: {bucket}/missing.bin: No such object"):
        fs.cat_file(f"{bucket}/missing.bin")


def test_opening_a_missing_object(fs, bucket):
    with pytest.raises(FileNotFoundError, match=f"No such object or bucket: {bucket}/missing.bin: No such object"):
        fs.open(f"{bucket}/missing.bin", "rb")


def test_batch_read_with_one_missing_object(fs, flux_server, bucket):
    fs.pipe({f"{bucket}/a": b"aaa", f"{bucket}/b": b"bbb"})
    with pytest.raises(FileNotFoundError, match=f"No such object or bucket: {bucket}/nope: No such object"):
        fs.cat([f"{bucket}/a", f"{bucket}/nope", f"{bucket}/b"])
    got = fs.cat([f"{bucket}/a", f"{bucket}/nope", f"{bucket}/b"], on_error="return")
    assert got[f"{bucket}/a"] == b"aaa" and got[f"{bucket}/b"] == b"bbb"
    assert isinstance(got[f"{bucket}/nope"], FileNotFoundError)
    assert_nothing_left(flux_server, bucket)


def test_object_deleted_after_listing(fs, flux_server, bucket):
    flux_server.generate(bucket, 40, size=100, prefix="d/")
    infos = [i for batch in fs.iter_objects(f"{bucket}/d") for i in batch]
    fs.rm_file(f"{bucket}/d/00000007")
    with pytest.raises(FileNotFoundError, match=rf"{bucket}/d/00000007#\d+ changed while being read: generation "
                                                r"\d+ no longer exists \(overwritten or deleted\)"):
        fs.cat_objects(infos)  # ObjectChanged, a FileNotFoundError
    got = fs.cat_objects(infos, on_error="omit")
    assert len(got) == 39 and f"{bucket}/d/00000007" not in got
    assert_nothing_left(flux_server, bucket)


def test_dataset_of_objects_with_one_missing(storage_options, fs, bucket):
    from fluxfs.pipes import FluxMapDataset

    fs.pipe(f"{bucket}/there", b"x")
    ds = FluxMapDataset.from_objects([f"flux://{bucket}/there", f"flux://{bucket}/gone"],
                                     storage_options=storage_options)
    with pytest.raises(FileNotFoundError, match=rf"1 object\(s\) of 2 object URLs do not exist: flux://{bucket}/gone "
                                                r"\(pass on_missing='skip'"):
        len(ds)


def test_map_dataset_over_an_empty_prefix(storage_options, bucket):
    from fluxfs.pipes import FluxMapDataset

    ds = FluxMapDataset.from_prefix(f"flux://{bucket}/nothing/", storage_options=storage_options)
    with pytest.raises(FileNotFoundError, match=f"no objects under flux://{bucket}/nothing/"):
        len(ds)


def test_iterable_dataset_over_an_empty_prefix(storage_options, bucket):
    from fluxfs.pipes import FluxIterableDataset

    with pytest.raises(FileNotFoundError, match=f"no objects under flux://{bucket}/nothing/"):
        FluxIterableDataset.from_prefix(f"flux://{bucket}/nothing/", storage_options=storage_options)


def test_prefix_that_is_a_file(storage_options, fs, bucket):
    from fluxfs.pipes import FluxMapDataset

    fs.pipe(f"{bucket}/train.tar", b"tar bytes")
    # As a directory ("train.tar/") there is nothing under it: a clear error, not an empty epoch.
    ds = FluxMapDataset.from_prefix(f"flux://{bucket}/train.tar/", storage_options=storage_options)
    with pytest.raises(FileNotFoundError, match=f"no objects under flux://{bucket}/train.tar/"):
        len(ds)
    # As a key prefix it matches the object itself, like `gsutil ls gs://b/train.tar*`.
    ds = FluxMapDataset.from_prefix(f"flux://{bucket}/train.tar", storage_options=storage_options)
    assert len(ds) == 1 and ds[0] == ("train.tar", b"tar bytes")


def test_opening_a_prefix_as_a_file(fs, bucket):
    fs.pipe(f"{bucket}/dir/a", b"a")
    with pytest.raises(FileNotFoundError, match=f"No such object or bucket: {bucket}/dir: No such object"):
        fs.open(f"{bucket}/dir", "rb")


def test_exclusive_create_of_an_existing_object(fs, flux_server, bucket):
    fs.pipe(f"{bucket}/keep", b"original")
    with pytest.raises(FileExistsError, match=rf"{bucket}/keep already exists \(mode 'xb' creates only new objects\)"):
        with fs.open(f"{bucket}/keep", "xb") as f:
            f.write(b"replacement")
    assert fs.cat_file(f"{bucket}/keep") == b"original"
    assert_nothing_left(flux_server, bucket)

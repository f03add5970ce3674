"""Atomicity: an object appears only on a clean close; every failure leaves nothing behind."""
from __future__ import annotations

import gc
import threading

import fsspec
import pytest

from fluxfs.errors import HttpError
from fluxfs.gcs.checksums import crc32c, crc32c_combine
from fluxfs.writes.fields import ObjectFields
from fluxfs.writes.parts import PartWriter
from fluxfs.writes.xml import XmlUploader
from tests.conftest import make_fs

from .util import COMPOSE_PART, PART_SIZES, XML_PART, payload, temp_leftovers, write_in_pieces

STRATEGIES = ["xml", "compose", "resumable"]


def assert_nothing_left(server, fs, bucket, path):
    assert not fs.exists(path)
    assert server.multipart_uploads(bucket) == []
    assert server.list_names(bucket, "_fluxfs-tmp/") == []


def fs_for(server, multipart, **kw):
    return make_fs(server, multipart=multipart, part_size=PART_SIZES[multipart], **kw)


@pytest.mark.parametrize("multipart", STRATEGIES)
def test_exception_inside_with_aborts(flux_server, bucket, multipart):
    fs = fs_for(flux_server, multipart)
    path = f"{bucket}/ckpt"
    with pytest.raises(RuntimeError, match="boom"):
        with fs.open(path, "wb") as f:
            write_in_pieces(f, payload(3 * PART_SIZES[multipart] + 5))
            raise RuntimeError("boom")
    assert_nothing_left(flux_server, fs, bucket, path)


@pytest.mark.parametrize("multipart", ["xml", "compose"])
def test_exception_inside_fsspec_open_aborts(flux_server, bucket, multipart):
    """fsspec's OpenFile.__exit__ just calls close(): the handle notices the exception in flight."""
    url = f"flux://{bucket}/ckpt"
    opts = dict(endpoint_url=flux_server.url, token="anon", multipart=multipart, part_size=PART_SIZES[multipart])
    with pytest.raises(ValueError, match="bad tensor"):
        with fsspec.open(url, "wb", **opts) as f:
            f.write(payload(2 * PART_SIZES[multipart] + 1))
            raise ValueError("bad tensor")
    fs = make_fs(flux_server)
    assert_nothing_left(flux_server, fs, bucket, f"{bucket}/ckpt")
    # ...while a clean fsspec.open block commits, even when nested inside an except clause.
    try:
        raise KeyError("unrelated, already being handled")
    except KeyError:
        with fsspec.open(url, "wb", **opts) as f:
            f.write(b"ok")
    assert fs.cat_file(f"{bucket}/ckpt") == b"ok"


@pytest.mark.parametrize("multipart", ["xml", "compose"])
def test_keyboard_interrupt_aborts(flux_server, bucket, multipart):
    fs = fs_for(flux_server, multipart)
    path = f"{bucket}/ckpt"
    with pytest.raises(KeyboardInterrupt):
        with fs.open(path, "wb") as f:
            f.write(payload(2 * PART_SIZES[multipart]))
            raise KeyboardInterrupt
    assert_nothing_left(flux_server, fs, bucket, path)


@pytest.mark.parametrize("multipart", ["xml", "compose"])
def test_failed_part_aborts_upload(flux_server, bucket, multipart):
    """Parts that keep failing (no retries left) make write/close raise, and nothing is left."""
    fs = fs_for(flux_server, multipart, retry={"write": {"max_attempts": 1}})
    fs.pipe_file(f"{bucket}/warm", b"")  # open the session before faults start
    path = f"{bucket}/ckpt"
    flux_server.configure(fail_rate=0.5, fail_ops=["write"], fail_codes=[503], seed=3)
    with pytest.raises(HttpError, match="503"):
        with fs.open(path, "wb") as f:
            write_in_pieces(f, payload(12 * PART_SIZES[multipart]), piece=PART_SIZES[multipart])
    flux_server.configure(fail_rate=0.0)
    assert_nothing_left(flux_server, fs, bucket, path)


def test_corrupted_part_is_rejected_and_nothing_completes(flux_server, bucket, fs):
    """A part whose bytes do not match its crc32c (corruption on the way) is refused by the server."""
    data = payload(XML_PART)
    good = crc32c(data)

    async def upload() -> None:
        pw = PartWriter(fs.client, bucket, "ckpt", XmlUploader, concurrency=2, create_only=False,
                        fields=ObjectFields())
        try:
            await pw.add_part(data, good)
            await pw.add_part(data, good ^ 1)
            await pw.finish(b"tail")
        except BaseException:
            await pw.abort()
            raise

    with pytest.raises(HttpError, match="crc32c"):
        fsspec.asyn.sync(fs.loop, upload)
    assert_nothing_left(flux_server, fs, bucket, f"{bucket}/ckpt")


def test_crc32c_combine_matches_whole_crc():
    for a_len, b_len in [(0, 0), (0, 5), (5, 0), (1, 1), (1000, 3), (COMPOSE_PART, 77), (123457, 98765)]:
        a, b = payload(a_len, 1), payload(b_len, 2)
        assert crc32c_combine(crc32c(a), crc32c(b), len(b)) == crc32c(a + b)


@pytest.mark.parametrize("multipart", STRATEGIES)
@pytest.mark.parametrize("parts", [0, 3])
def test_create_only(flux_server, bucket, multipart, parts):
    fs = fs_for(flux_server, multipart)
    path = f"{bucket}/ckpt"
    first = payload(parts * PART_SIZES[multipart] + 9, seed=1)
    with fs.open(path, "xb") as f:
        f.write(first)
    with pytest.raises(FileExistsError, match=f"{bucket}/ckpt"):
        with fs.open(path, "xb") as f:
            write_in_pieces(f, payload(parts * PART_SIZES[multipart] + 9, seed=2))
    assert fs.cat_file(path) == first
    assert flux_server.multipart_uploads(bucket) == []
    assert flux_server.list_names(bucket, "_fluxfs-tmp/") == []


def test_pipe_file_create_mode(flux_server, bucket):
    fs = fs_for(flux_server, "compose")
    data = payload(3 * COMPOSE_PART)
    fs.pipe_file(f"{bucket}/a", data, mode="create")
    with pytest.raises(FileExistsError, match=f"{bucket}/a"):
        fs.pipe_file(f"{bucket}/a", b"other", mode="create")
    assert fs.cat_file(f"{bucket}/a") == data
    assert flux_server.list_names(bucket, "_fluxfs-tmp/") == []


@pytest.mark.parametrize("multipart", ["xml", "compose"])
def test_concurrent_writers_last_completed_wins(flux_server, bucket, multipart):
    fs = fs_for(flux_server, multipart, write_concurrency=2)
    path = f"{bucket}/shared"
    size = 3 * PART_SIZES[multipart] + 17
    for rnd in range(2):
        datas = [payload(size, seed=10 * rnd + i) for i in range(3)]
        infos: dict[int, dict] = {}
        barrier = threading.Barrier(3)

        def writer(i: int) -> None:
            with fs.open(path, "wb") as f:
                barrier.wait()
                write_in_pieces(f, datas[i], piece=50_000 + 1000 * i)
            infos[i] = f.object_info

        threads = [threading.Thread(target=writer, args=(i,)) for i in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(infos) == 3  # every writer completed
        last = max(infos, key=lambda i: int(infos[i]["generation"]))
        assert fs.cat_file(path) == datas[last]
    assert flux_server.multipart_uploads(bucket) == []
    assert flux_server.list_names(bucket, "_fluxfs-tmp/") == []


def test_dropped_handle_never_commits(flux_server, bucket):
    fs = fs_for(flux_server, "xml")
    f = fs.open(f"{bucket}/dropped", "wb")
    f.write(payload(XML_PART + 1))
    del f
    gc.collect()
    assert_nothing_left(flux_server, fs, bucket, f"{bucket}/dropped")


def test_transaction_commits_at_the_end(flux_server, bucket):
    fs = fs_for(flux_server, "compose")
    data = payload(2 * COMPOSE_PART + 1)
    with fs.transaction:
        with fs.open(f"{bucket}/t", "wb") as f:
            f.write(data)
        assert not fs.exists(f"{bucket}/t")
    assert fs.cat_file(f"{bucket}/t") == data
    with pytest.raises(RuntimeError):
        with fs.transaction:
            with fs.open(f"{bucket}/u", "wb") as f:
                f.write(data)
            raise RuntimeError
    assert_nothing_left(flux_server, fs, bucket, f"{bucket}/u")


def test_compose_on_fake_gcs_leaves_no_temporaries_on_error(fake_gcs):
    from tests.conftest import new_bucket_name

    b = new_bucket_name()
    fake_gcs.create_bucket(b)
    fs = make_fs(fake_gcs, multipart="compose", part_size=COMPOSE_PART)
    with pytest.raises(RuntimeError):
        with fs.open(f"{b}/o", "wb") as f:
            f.write(payload(5 * COMPOSE_PART))
            raise RuntimeError
    assert not fs.exists(f"{b}/o")
    assert temp_leftovers(fake_gcs, b) == []


@pytest.mark.parametrize("multipart", ["xml", "compose", "resumable"])
def test_failed_put_file_leaves_nothing(flux_server, bucket, multipart, tmp_path):
    """A local upload whose parts keep failing raises and leaves no object, upload or temporary behind."""
    fs = fs_for(flux_server, multipart, retry={"write": {"max_attempts": 1}})
    fs.pipe_file(f"{bucket}/warm", b"")  # open the session before faults start
    local = tmp_path / "big.bin"
    local.write_bytes(payload(12 * PART_SIZES[multipart]))
    path = f"{bucket}/put"
    flux_server.configure(fail_rate=0.5, fail_ops=["write"], fail_codes=[503], seed=3)
    with pytest.raises(HttpError, match="503"):
        fs.put_file(str(local), path)
    flux_server.configure(fail_rate=0.0)
    assert_nothing_left(flux_server, fs, bucket, path)

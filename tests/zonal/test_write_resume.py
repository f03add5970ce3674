"""A zonal write whose BidiWriteObject stream breaks midway is resumed from the persisted size with the bytes it
kept: the object is exact and finalized; where resuming could not be exact it fails naming the object, leaving no
object. Faults are the embedded server's (`cut_replies` of "write": a stream cut after a flush, unflushed bytes
dropped as GCS drops them)."""
from __future__ import annotations

import os
import time

import pytest

from fluxfs.errors import AppendTakenOver, ResumeImpossible, RetryableError, TakenOverWhileResuming
from tests.zonal.conftest import zonal_fs

MiB = 2**20


def _embedded(server):
    if server.server is None:
        pytest.skip("injected write-stream cuts are the embedded server's (the testbench has no such fault)")
    return server.server


TWO_PARTS = 10 * MiB  # a write's first part is 2 MiB (its stream opens early), the next ones 8 MiB (part_size)


def _persisted(server, path: str, size: int) -> None:
    """Wait until the unfinalized object at `path` shows `size` persisted bytes."""
    look = zonal_fs(server)
    deadline = time.monotonic() + 10
    while True:
        look.invalidate_cache()
        if look.exists(path) and look.info(path)["size"] == size:
            return
        assert time.monotonic() < deadline, f"{path} never reached {size} persisted bytes"
        time.sleep(0.05)


@pytest.mark.parametrize("cuts", [1, 2])
def test_write_survives_cut_streams(zonal, cuts):
    """40 MiB in 1 MiB writes (a 2 MiB part, then 8 MiB ones), streams cut midway: resumed, exact, finalized."""
    server, bucket = zonal
    srv = _embedded(server)
    fs = zonal_fs(server)
    data = os.urandom(40 * MiB + 11)
    srv.reset_stats()
    srv.configure(cut_replies=cuts, fail_ops="write")
    try:
        with fs.open(f"{bucket}/ckpt", "wb") as f:
            for i in range(0, len(data), MiB):
                f.write(data[i:i + MiB])
    finally:
        srv.configure(cut_replies=0, fail_ops=None)
    assert srv.stats()["faults"]["write"] == cuts
    assert "finalized" in f.object_info and f.object_info["size"] == len(data)
    assert fs.cat_file(f"{bucket}/ckpt") == data
    with pytest.raises(PermissionError, match="finalized"):
        fs.open(f"{bucket}/ckpt", "ab")


def test_append_survives_a_cut_stream(zonal):
    """"ab" onto an unfinalized object, its stream cut after the first part: resumed, the object exact and left
    appendable."""
    server, bucket = zonal
    srv = _embedded(server)
    fs = zonal_fs(server)
    path = f"{bucket}/log"
    head, more = os.urandom(MiB + 3), os.urandom(17 * MiB)
    with fs.open(path, "ab") as f:
        f.write(head)
    srv.reset_stats()
    srv.configure(cut_replies=1, fail_ops="write")
    try:
        with fs.open(path, "ab") as f:
            f.write(more)
    finally:
        srv.configure(cut_replies=0, fail_ops=None)
    assert srv.stats()["faults"]["write"] == 1
    fs.invalidate_cache()
    assert fs.cat_file(path) == head + more
    with fs.open(path, "ab") as f:  # still appendable
        f.write(b"!")
    fs.invalidate_cache()
    assert fs.info(path)["size"] == len(head + more) + 1


def _refused_after(server, path: str, meddle, match: str) -> None:
    """A write whose first stream cut is resumed and whose second is not, after `meddle(path)` changed the object
    once two parts were flushed: ResumeImpossible matching `match`, and no object left."""
    srv = _embedded(server)
    fs = zonal_fs(server)
    srv.reset_stats()
    srv.configure(cut_replies=2, fail_ops="write")
    try:
        with pytest.raises(ResumeImpossible, match=match):
            with fs.open(path, "wb") as f:
                f.write(os.urandom(TWO_PARTS))
                f.write(b"x")
                _persisted(server, path, TWO_PARTS)  # two parts flushed
                meddle(path)
                f.write(os.urandom(9 * MiB))
    finally:
        srv.configure(cut_replies=0, fail_ops=None)
    assert srv.stats()["faults"]["write"] == 2
    fs.invalidate_cache()
    assert not fs.exists(path)  # the write's own generation is deleted, as for any failed write


def test_cut_after_the_object_was_deleted_fails_naming_it(zonal):
    """The stream breaks after the object was deleted: it cannot be taken over again; the write fails naming it."""
    server, bucket = zonal
    _refused_after(server, f"{bucket}/gone", lambda path: zonal_fs(server).rm(path), f"{bucket}/gone.*stream broke")


@pytest.mark.parametrize("appended", [MiB, 9 * MiB])
def test_cut_after_another_writer_appended_fails_naming_it(zonal, appended):
    """Another writer took the object over and appended before the stream broke (its abort reached this stream as
    a cut, as gRPC may report it): what GCS holds past the confirmed bytes is not ours (within the part in
    progress, told by crc32c; beyond it, by size). Refused as the takeover it is: nothing more written, and the
    object, with the other writer's bytes, left to that writer (never deleted)."""
    server, bucket = zonal
    srv = _embedded(server)
    fs = zonal_fs(server)
    path = f"{bucket}/shared"
    other_bytes = os.urandom(appended)
    srv.reset_stats()
    srv.configure(cut_replies=2, fail_ops="write")
    try:
        with pytest.raises(AppendTakenOver, match="another writer took the unfinished object over") as caught:
            with fs.open(path, "wb") as f:
                f.write(os.urandom(TWO_PARTS))
                f.write(b"x")
                _persisted(server, path, TWO_PARTS)  # two parts flushed
                with zonal_fs(server).open(path, "ab") as other:
                    other.write(other_bytes)
                f.write(os.urandom(9 * MiB))
    finally:
        srv.configure(cut_replies=0, fail_ops=None)
    assert isinstance(caught.value.__cause__, TakenOverWhileResuming)
    assert isinstance(caught.value.__cause__, ResumeImpossible)
    assert f"cannot resume the write of {path}" in str(caught.value.__cause__)
    assert "another writer" in str(caught.value.__cause__)
    fs.invalidate_cache()
    assert fs.cat_file(path).endswith(other_bytes)  # the other writer's object, its bytes kept


def test_cuts_beyond_the_retry_policy_fail_naming_the_object(zonal):
    """Resuming is bounded by the write retry policy: a stream broken again each time fails the write, naming it,
    and leaves no object."""
    server, bucket = zonal
    srv = _embedded(server)
    fs = zonal_fs(server, retry={"write": {"max_attempts": 2, "initial": 0.01}})
    path = f"{bucket}/flaky"
    srv.reset_stats()
    srv.configure(reset_rate=1.0, fail_ops="write")
    try:
        with pytest.raises(RetryableError, match=f"{path}.*cut"):
            with fs.open(path, "wb") as f:
                f.write(os.urandom(17 * MiB))
    finally:
        srv.configure(reset_rate=0.0, fail_ops=None)
    assert srv.stats()["faults"]["write"] >= 2
    fs.invalidate_cache()
    assert not fs.exists(path)


def test_refused_stream_openings_are_retried_under_the_write_policy(zonal):
    """A write stream's opening answered UNAVAILABLE is tried again, each try an attempt of the write retry policy
    (as an HTTP request's): every write lands exact; refused every time, the write fails after exactly the policy's
    attempts, naming the object, and leaves nothing."""
    server, bucket = zonal
    srv = _embedded(server)
    fs = zonal_fs(server, retry={"write": {"max_attempts": 12, "initial": 0.01, "maximum": 0.05}})
    data = {f"{bucket}/o{i}": os.urandom(1000 + i) for i in range(8)}
    srv.reset_stats()
    srv.configure(fail_rate=0.5, fail_codes=[503], fail_ops="write", seed=7)
    try:
        for path, body in data.items():
            fs.pipe_file(path, body)
    finally:
        srv.configure(fail_rate=0.0, fail_ops=None)
    assert srv.stats()["faults"]["write"] >= 1
    assert {p: fs.cat_file(p) for p in data} == data
    strict = zonal_fs(server, retry={"write": {"max_attempts": 3, "initial": 0.01}})
    srv.reset_stats()
    srv.configure(fail_rate=1.0, fail_codes=[503], fail_ops="write")
    try:
        with pytest.raises(RetryableError, match=f"{bucket}/never"):
            strict.pipe_file(f"{bucket}/never", b"x" * 100)
    finally:
        srv.configure(fail_rate=0.0, fail_ops=None)
    assert srv.stats()["faults"]["write"] == 3
    assert not strict.exists(f"{bucket}/never")

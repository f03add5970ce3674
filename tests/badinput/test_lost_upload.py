"""Bad-input catalogue: the server forgets an XML multipart upload (a restart, or `fluxfs cleanup` /
`abort_incomplete_uploads` run elsewhere) or a resumable session (a restart, expiry) mid-write
(docs/bad-inputs.md).

The writer says what happened, and where the data is still in hand (`pipe_file`, `put_file`) the
upload starts over once, so the object is written whole.
"""
from __future__ import annotations

import os
import time

import pytest

from fluxfs import temporaries
from fluxfs.errors import UploadLost
from fluxfs.gcs import bridge
from tests.conftest import make_fs

from .conftest import assert_nothing_left
from .test_stalls import within

MiB = 2**20


def lose_the_upload_mid_write(flux_server, bucket, write):
    """Run `write` while its part uploads are held mid-body, abort its upload from another filesystem
    (as `fluxfs cleanup` does), then let the parts go on."""
    flux_server.configure(stall_after=MiB, fail_ops={"write"})
    box: dict = {}
    import threading

    t = threading.Thread(target=lambda: box.update(within(60, write)), daemon=True)
    t.start()
    deadline = time.monotonic() + 20
    while not flux_server.multipart_uploads(bucket) and time.monotonic() < deadline:
        time.sleep(0.05)
    other = make_fs(flux_server)
    aborted = bridge.run(other, lambda: temporaries.abort_incomplete_uploads(other, bucket))
    assert aborted, "no upload to abort"
    flux_server.configure(stall_after=None)
    t.join(60)
    return box


def test_handle_write_says_the_upload_was_lost(flux_server, bucket):
    fs = make_fs(flux_server, multipart="xml", part_size=5 * MiB)
    data = os.urandom(6 * MiB)

    def write():
        with fs.open(f"{bucket}/k", "wb") as f:
            f.write(data)

    box = lose_the_upload_mid_write(flux_server, bucket, write)
    err = box.get("error")
    assert isinstance(err, UploadLost), box
    assert str(err) == (f"{bucket}/k: the multipart upload was aborted or lost on the server (a server restart, "
                        f"or `fluxfs cleanup` / abort_incomplete_uploads elsewhere); nothing was written")
    assert not fs.exists(f"{bucket}/k")
    assert_nothing_left(flux_server, bucket)


@pytest.mark.parametrize("how", ["pipe_file", "put_file"])
def test_upload_with_the_data_in_hand_starts_over_once(flux_server, bucket, how, tmp_path):
    fs = make_fs(flux_server, multipart="xml", part_size=5 * MiB)
    data = os.urandom(11 * MiB)
    local = tmp_path / "local.bin"
    local.write_bytes(data)
    write = {"pipe_file": lambda: fs.pipe_file(f"{bucket}/k", data),
             "put_file": lambda: fs.put_file(str(local), f"{bucket}/k")}[how]
    box = lose_the_upload_mid_write(flux_server, bucket, write)
    assert "error" not in box, box.get("error")
    assert fs.cat_file(f"{bucket}/k") == data
    assert_nothing_left(flux_server, bucket)


def delete_the_parts_before_compose(flux_server, bucket, write):
    """Run `write` (compose mode) with its compose held mid-request, delete every temporary under the
    reserved prefix (as `fluxfs cleanup` of a crashed job would), then let the compose go on."""
    import threading

    from fluxfs.gcs.tempnames import TEMP_PREFIX

    flux_server.reset_stats()
    flux_server.configure(stall_after=10, fail_ops={"compose"})
    box: dict = {}
    t = threading.Thread(target=lambda: box.update(within(60, write)), daemon=True)
    t.start()
    deadline = time.monotonic() + 20
    while flux_server.stats()["faults"].get("compose", 0) == 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    other = make_fs(flux_server)
    parts = flux_server.list_names(bucket, TEMP_PREFIX)
    assert parts, "no parts to delete"
    other.rm([f"{bucket}/{p}" for p in parts])
    flux_server.configure(stall_after=None)
    t.join(60)
    return box


def test_compose_write_whose_parts_were_deleted_says_so(flux_server, bucket):
    fs = make_fs(flux_server, multipart="compose", part_size=256 * 1024)
    data = os.urandom(600 * 1024)

    def write():
        with fs.open(f"{bucket}/k", "wb") as f:
            f.write(data)

    box = delete_the_parts_before_compose(flux_server, bucket, write)
    assert isinstance(box.get("error"), UploadLost), box
    assert str(box["error"]) == (f"{bucket}/k: its uploaded parts were deleted on the server (`fluxfs cleanup` "
                                 f"elsewhere?) before they were composed; nothing was written")
    assert not fs.exists(f"{bucket}/k")
    assert_nothing_left(flux_server, bucket)


def test_compose_pipe_file_whose_parts_were_deleted_starts_over(flux_server, bucket):
    fs = make_fs(flux_server, multipart="compose", part_size=256 * 1024)
    data = os.urandom(600 * 1024)
    box = delete_the_parts_before_compose(flux_server, bucket, lambda: fs.pipe_file(f"{bucket}/k", data))
    assert "error" not in box, box.get("error")
    assert fs.cat_file(f"{bucket}/k") == data
    assert_nothing_left(flux_server, bucket)


def lose_the_session_mid_write(flux_server, bucket, write, how="restart"):
    """Run `write` (multipart="resumable") with a chunk held mid-body, lose the bucket's resumable sessions
    (`how`: "restart" drops them as a server restart without a root does; "expiry" makes every session,
    later ones too, expire at once), then let the chunk go on."""
    import threading

    flux_server.reset_stats()
    flux_server.configure(stall_after=MiB // 2, fail_ops={"write"})
    box: dict = {}
    t = threading.Thread(target=lambda: box.update(within(60, write)), daemon=True)
    t.start()
    deadline = time.monotonic() + 20
    while flux_server.stats()["faults"].get("write", 0) == 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    if how == "restart":
        assert flux_server.forget_sessions(bucket) == ["k"], "no session to lose"
    else:
        flux_server.configure(resumable_ttl_s=0.001)
    flux_server.configure(stall_after=None)
    t.join(60)
    return box


@pytest.mark.parametrize("how", ["restart", "expiry"])
def test_resumable_write_whose_session_was_lost_says_so(flux_server, bucket, how):
    fs = make_fs(flux_server, multipart="resumable", part_size=MiB)
    data = os.urandom(3 * MiB)

    def write():
        with fs.open(f"{bucket}/k", "wb") as f:
            f.write(data)

    box = lose_the_session_mid_write(flux_server, bucket, write, how)
    assert isinstance(box.get("error"), UploadLost), box
    assert str(box["error"]) == (f"{bucket}/k: the resumable upload session was cancelled or lost on the server "
                                 f"(a server restart, or the session expired); nothing was written")
    assert not fs.exists(f"{bucket}/k")
    assert_nothing_left(flux_server, bucket)


@pytest.mark.parametrize("how", ["pipe_file", "put_file"])
def test_resumable_upload_with_the_data_in_hand_starts_over_once(flux_server, bucket, how, tmp_path):
    fs = make_fs(flux_server, multipart="resumable", part_size=MiB)
    data = os.urandom(3 * MiB + 12345)
    local = tmp_path / "local.bin"
    local.write_bytes(data)
    write = {"pipe_file": lambda: fs.pipe_file(f"{bucket}/k", data),
             "put_file": lambda: fs.put_file(str(local), f"{bucket}/k")}[how]
    box = lose_the_session_mid_write(flux_server, bucket, write)
    assert "error" not in box, box.get("error")
    assert fs.cat_file(f"{bucket}/k") == data
    assert_nothing_left(flux_server, bucket)


def test_resumable_pipe_file_starts_over_only_once(flux_server, bucket):
    """Every session expires at once: the one restart fails too, and that is reported, not retried again."""
    fs = make_fs(flux_server, multipart="resumable", part_size=MiB)
    data = os.urandom(3 * MiB)
    box = lose_the_session_mid_write(flux_server, bucket, lambda: fs.pipe_file(f"{bucket}/k", data), "expiry")
    assert isinstance(box.get("error"), UploadLost), box
    assert str(box["error"]).startswith(f"{bucket}/k: the resumable upload session was cancelled or lost")
    assert not fs.exists(f"{bucket}/k")
    assert_nothing_left(flux_server, bucket)

"""Bad-input catalogue: a server that stops reading mid-body, and an uplink slower than `read_timeout`
(docs/bad-inputs.md).

Timeouts measure progress: a request fails once no byte moved for `read_timeout` seconds in either
direction, and a slow transfer that keeps moving completes however long it takes.
"""
from __future__ import annotations

import os
import threading
import time

import pytest

from fluxfs.errors import RequestTimeout
from tests.conftest import make_fs

from .conftest import assert_nothing_left

MiB = 2**20
QUICK = {"max_attempts": 2, "initial": 0.01, "maximum": 0.02}


def within(seconds: float, fn):
    """Run `fn` in a thread; fail (instead of hanging the suite) if it has not returned in time."""
    box: dict = {}

    def target():
        try:
            box["value"] = fn()
        except BaseException as exc:  # handed to the test
            box["error"] = exc

    t = threading.Thread(target=target, daemon=True)
    start = time.monotonic()
    t.start()
    t.join(seconds)
    assert not t.is_alive(), f"still running after {seconds} s: the request never gave up"
    box["elapsed"] = time.monotonic() - start
    return box


@pytest.mark.parametrize("multipart", ["xml", "compose", "resumable"])
def test_writer_gives_up_when_the_server_stops_reading(flux_server, bucket, multipart):
    fs = make_fs(flux_server, multipart=multipart, part_size=16 * MiB, read_timeout=1, retry=QUICK)
    data = os.urandom(16 * MiB + 1)
    # Each upload body stops being read after 1 MiB: the rest fills the socket buffers, then nothing moves.
    flux_server.configure(stall_after=MiB, fail_ops={"write"})

    def write():
        with fs.open(f"{bucket}/big", "wb") as f:
            f.write(data)

    box = within(30, write)
    flux_server.configure(stall_after=None)
    assert isinstance(box.get("error"), RequestTimeout), box
    assert str(box["error"]).startswith(f"{bucket}/big")
    assert "timed out: the server took no bytes of the request body for 1 s" in str(box["error"])
    assert box["elapsed"] < 10
    assert not fs.exists(f"{bucket}/big")
    assert_nothing_left(flux_server, bucket)


def test_reader_gives_up_when_the_answer_stalls(flux_server, bucket):
    fs = make_fs(flux_server, read_timeout=1, retry=QUICK)
    fs.pipe_file(f"{bucket}/big", os.urandom(4 * MiB))
    flux_server.configure(stall_after=MiB, fail_ops={"read"})
    box = within(30, lambda: fs.cat_file(f"{bucket}/big"))
    assert isinstance(box.get("error"), RequestTimeout), box
    assert str(box["error"]).startswith(f"{bucket}/big: timed out")
    assert box["elapsed"] < 10


@pytest.mark.parametrize("multipart", ["xml", "compose", "resumable"])
def test_slow_uplink_completes(flux_server, bucket, multipart):
    # 2 MB/s each way, parts of 5 MiB (2.6 s each on the wire): much longer than read_timeout, but never idle.
    fs = make_fs(flux_server, multipart=multipart, part_size=5 * MiB, read_timeout=1, retry=QUICK)
    data = os.urandom(6 * MiB)
    flux_server.configure(bandwidth_mbps=2)
    box = within(60, lambda: fs.pipe_file(f"{bucket}/slow", data))
    flux_server.configure(bandwidth_mbps=0)
    assert "error" not in box, box.get("error")
    assert fs.cat_file(f"{bucket}/slow") == data
    assert_nothing_left(flux_server, bucket)


def test_gcsfs_own_requests_time_out_naming_what(flux_server, bucket):
    """`fs.ls` goes through gcsfs's requests, which waited up to aiohttp's 300 s per attempt (6 attempts).
    Now each waits `read_timeout`; gcsfs's own backoff between its 6 attempts still adds ~31 s."""
    fs = make_fs(flux_server, read_timeout=0.5)
    fs.pipe_file(f"{bucket}/a", b"x")
    fs.invalidate_cache()
    flux_server.configure(stall_after=10, fail_ops={"list"})
    box = within(120, lambda: fs.ls(bucket))
    assert isinstance(box.get("error"), RequestTimeout), box
    assert str(box["error"]).startswith(f"{bucket}: timed out: no answer from the server within 0.5 s (GET")
    assert box["elapsed"] < 60

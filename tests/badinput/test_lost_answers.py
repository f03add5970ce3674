"""Bad-input catalogue: answers lost on the way back (server `lose_replies=`: the request is carried out,
the connection closes unanswered) to writes that are not idempotent (docs/bad-inputs.md, docs/retries.md).

A retry never applies a write twice: temporaries are created only if absent (`ifGenerationMatch=0`), so
a retry finds its own object; an overwrite's retry first looks for its object, then is pinned to the
generation it saw.
"""
from __future__ import annotations

import os

import pytest

from tests.conftest import make_fs, wait_for

from .conftest import assert_nothing_left

KiB = 1024
FAST = {"initial": 0.01, "maximum": 0.05}


def objects_made_by(flux_server, write) -> int:
    """How many objects (generations: parts, composites, the destination) `write()` makes on the server."""
    flux_server.reset_stats()
    write()
    return flux_server.stats()["generations_made"]


@pytest.mark.parametrize("multipart,op,size", [
    ("xml", "write", 10 * KiB),             # one-request upload of a small object (over an older one)
    ("compose", "write", 3 * 256 * KiB),    # a part uploaded as a temporary object
    ("compose", "compose", 3 * 256 * KiB),  # the final compose (over an older object)
])
def test_a_lost_answer_is_not_applied_twice(flux_server, bucket, multipart, op, size):
    part = 256 * KiB if multipart == "compose" else 5 * 1024 * KiB
    fs = make_fs(flux_server, multipart=multipart, part_size=part, retry=FAST)
    path = f"{bucket}/k"
    fs.pipe_file(path, b"older")
    data = os.urandom(size)
    clean = objects_made_by(flux_server, lambda: fs.pipe_file(path, os.urandom(size)))
    flux_server.configure(lose_replies=1, fail_ops=[op])
    lossy = objects_made_by(flux_server, lambda: fs.pipe_file(path, data))
    assert flux_server.stats()["faults"].get(op) == 1  # an answer was lost
    assert lossy == clean, f"{lossy} objects made, {clean} without the lost answer: the retry wrote again"
    assert fs.cat_file(path) == data
    assert_nothing_left(flux_server, bucket)


def test_a_lost_answer_to_a_batched_read_compose_is_not_applied_twice(flux_server, bucket):
    flux_server.generate(bucket, 40, size=100, prefix="s/")
    fs = make_fs(flux_server, retry=FAST)
    infos = [i for batch in fs.iter_objects(f"{bucket}/s") for i in batch]
    want = fs.cat_objects(infos)
    clean = objects_made_by(flux_server, lambda: fs.cat_objects(infos))
    flux_server.configure(lose_replies=1, fail_ops=["compose"])
    got = {}
    lossy = objects_made_by(flux_server, lambda: got.update(fs.cat_objects(infos)))
    assert flux_server.stats()["faults"].get("compose") == 1
    assert lossy == clean, f"{lossy} composites made, {clean} without the lost answer"
    assert got == want
    assert_nothing_left(flux_server, bucket)


def test_a_lost_answer_to_the_final_resumable_chunk_is_confirmed(flux_server, bucket):
    """The final chunk lands but its answer is lost; the resend (the HTTP client's own, or ours) finds the
    session finalized (404): the object is read back and accepted, not reported as an upload lost."""
    fs = make_fs(flux_server, multipart="resumable", part_size=256 * KiB, retry=FAST)
    path = f"{bucket}/k"
    data = os.urandom(256 * KiB + 1000)
    flux_server.reset_stats()
    with fs.open(path, "wb") as f:
        f.write(data)  # the session starts and its first chunk goes

        def first_chunk_answered() -> bool:  # its answer is settled (lost or not) once it is no longer served
            stats = flux_server.stats()
            return stats["requests"].get("write", 0) >= 2 and not stats["in_flight"].get("write")

        wait_for(first_chunk_answered, "the first chunk's answer", timeout=20)
        flux_server.configure(lose_replies=1, fail_ops=["write"])
    assert flux_server.stats()["faults"].get("write") == 1  # the final chunk's answer was lost
    assert fs.cat_file(path) == data
    assert_nothing_left(flux_server, bucket)

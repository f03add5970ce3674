"""A writer killed mid-upload leaves no visible object; abort/cleanup then remove its leftovers."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import fsspec.asyn
import pytest

from fluxfs import temporaries
from fluxfs.temporaries import abort_incomplete_uploads
from tests.conftest import make_fs, wait_for

from .util import PART_SIZES

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("multipart", ["xml", "compose"])
def test_killed_writer_leaves_no_object(flux_server, bucket, multipart):
    flux_server.configure(latency_ms=100)  # parts take a while, so the kill lands mid-upload
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.writes.writer_proc", flux_server.url, bucket, "ckpt", multipart,
         str(PART_SIZES[multipart])],
        cwd=ROOT, stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    try:
        assert proc.stdout.readline().strip() == "PARTS-IN-FLIGHT"
        # Killed once the server holds what it leaves behind: the XML upload, or a compose part.
        if multipart == "xml":
            wait_for(lambda: flux_server.multipart_uploads(bucket), "the XML upload")
        else:
            wait_for(lambda: flux_server.list_names(bucket, "_fluxfs-tmp/"), "a compose part")
    finally:
        proc.kill()  # SIGKILL
        proc.wait(30)
    assert proc.returncode == -signal.SIGKILL
    flux_server.configure(latency_ms=0)
    # The requests the writer had sent finish (or fail) on the server before anything is checked.
    wait_for(lambda: not flux_server.stats()["in_flight"], "the killed writer's requests to end")
    fs = make_fs(flux_server)
    assert not fs.exists(f"{bucket}/ckpt")
    if multipart == "xml":
        assert [u["key"] for u in flux_server.multipart_uploads(bucket)] == ["ckpt"]
        assert fsspec.asyn.sync(fs.loop, abort_incomplete_uploads, fs, bucket, "", 0) == ["ckpt"]
        assert flux_server.multipart_uploads(bucket) == []
    else:
        assert flux_server.list_names(bucket, "_fluxfs-tmp/")  # the parts it had uploaded
        assert temporaries.cleanup(fs, f"flux://{bucket}", older_than=0) >= 1
        assert flux_server.list_names(bucket, "_fluxfs-tmp/") == []
    assert not fs.exists(f"{bucket}/ckpt")


@pytest.mark.parametrize("multipart", ["xml", "compose"])
def test_unclosed_writer_is_aborted_at_exit(flux_server, bucket, multipart):
    out = subprocess.run(
        [sys.executable, "-m", "tests.writes.writer_proc", flux_server.url, bucket, "ckpt", multipart,
         str(PART_SIZES[multipart]), "exit"],
        cwd=ROOT, capture_output=True, text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert out.returncode == 0 and "EXITING" in out.stdout, out.stderr[-2000:]
    fs = make_fs(flux_server)
    assert not fs.exists(f"{bucket}/ckpt")
    assert flux_server.multipart_uploads(bucket) == []
    assert flux_server.list_names(bucket, "_fluxfs-tmp/") == []

"""A user's objects under fluxfs's reserved prefix are the user's: listed, read, never deleted by
`cleanup`; only what fluxfs created (named and marked as a temporary) is hidden or removed
(docs/bad-inputs.md, "Objects under the reserved prefix")."""
from __future__ import annotations

import contextlib
import io
import subprocess
import sys
import textwrap

import pytest

from fluxfs import temporaries
from fluxfs.cli import main
from fluxfs.gcs import tempnames
from tests.conftest import make_fs


def _cleanup_cli(server, url: str) -> tuple[int, str]:
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = main(["--endpoint", server.url, "cleanup", url, "--older-than", "0"])
    return code, err.getvalue()


def test_user_object_under_the_prefix_is_listed_read_and_kept(flux_server, bucket, fs):
    fs.pipe_file(f"{bucket}/_fluxfs-tmp/mine.txt", b"my notes")
    fs.pipe_file(f"{bucket}/_fluxfs-tmp/compose/notes/today.md", b"more")
    assert fs.find(bucket) == [f"{bucket}/_fluxfs-tmp/compose/notes/today.md", f"{bucket}/_fluxfs-tmp/mine.txt"]
    assert fs.find(f"{bucket}/_fluxfs-tmp/") == fs.find(bucket)
    assert fs.cat(f"{bucket}/_fluxfs-tmp/mine.txt") == b"my notes"
    assert temporaries.cleanup(make_fs(flux_server), bucket) == 0
    code, err = _cleanup_cli(flux_server, f"flux://{bucket}")
    assert code == 0
    assert (f"left 2 object(s) under _fluxfs-tmp/ that fluxfs did not create (not named and marked as its "
            f"temporaries): {bucket}/_fluxfs-tmp/compose/notes/today.md, {bucket}/_fluxfs-tmp/mine.txt") in err
    assert flux_server.list_names(bucket) == ["_fluxfs-tmp/compose/notes/today.md", "_fluxfs-tmp/mine.txt"]


def test_leftover_temporary_is_hidden_and_cleaned(flux_server, bucket):
    """A compose-mode write whose process died (no atexit) leaves its marked parts: hidden, then cleaned."""
    script = textwrap.dedent(f"""
        import os, time
        from fluxfs import FluxFileSystem
        from fluxfs.server.handle import ServerHandle
        fs = FluxFileSystem(endpoint_url={flux_server.url!r}, token="anon", multipart="compose", part_size=65536)
        f = fs.open("{bucket}/big.bin", "wb")
        f.write(b"x" * (4 * 65536))
        f.flush()
        deadline = time.monotonic() + 60
        while len(ServerHandle({flux_server.url!r}).list_names("{bucket}", "_fluxfs-tmp/")) < 4:  # the parts land
            assert time.monotonic() < deadline, "the 4 parts never landed"
            time.sleep(0.01)
        os._exit(0)  # killed: no close, no atexit
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    parts = flux_server.list_names(bucket, "_fluxfs-tmp/")
    assert parts and all(tempnames.is_temporary_name(p) for p in parts)
    fs = make_fs(flux_server)
    assert fs.find(bucket) == []
    assert temporaries.cleanup_report(fs, bucket).__dict__ == {"removed": len(parts), "not_ours": [], "aborted": [],
                                                               "foreign_uploads": []}
    assert flux_server.list_names(bucket) == []


def test_name_like_a_temporary_without_the_marker_is_left_and_reported(flux_server, bucket, fs):
    forged = f"{bucket}/{tempnames.temp_key('1-host-1-dead', 'compose')}"
    fs.pipe_file(forged, b"not fluxfs's")
    marked = f"{bucket}/{tempnames.temp_key('1-host-1-dead', 'compose')}"
    fs.pipe_file(marked, b"fluxfs's", metadata=tempnames.marker("1-host-1-dead"))
    report = temporaries.cleanup_report(make_fs(flux_server), bucket)
    assert (report.removed, report.not_ours) == (1, [forged])
    assert flux_server.list_names(bucket) == [forged.split("/", 1)[1]]


def test_configured_prefix(flux_server, bucket):
    fs = make_fs(flux_server, temp_prefix="scratch/fluxfs/", multipart="compose", part_size=64 * 1024)
    fs.pipe_file(f"{bucket}/_fluxfs-tmp/mine.txt", b"mine")  # the default prefix is nothing special now
    flux_server.reset_stats()
    flux_server.generate(bucket, 40, size=100, prefix="s/")
    infos = [i for b in fs.iter_objects(f"{bucket}/s") for i in b]
    assert len(fs.cat_objects(infos)) == 40 and flux_server.stats()["requests"].get("compose", 0) > 0
    key = tempnames.temp_key(fs.job_id, "compose", "scratch/fluxfs/")
    fs.pipe_file(f"{bucket}/{key}", b"left", metadata=tempnames.marker(fs.job_id))
    assert f"{bucket}/{key}" not in fs.find(bucket) and f"{bucket}/_fluxfs-tmp/mine.txt" in fs.find(bucket)
    assert temporaries.cleanup(fs, bucket) == 1
    assert not [n for n in flux_server.list_names(bucket) if n.startswith("scratch/")]


@pytest.mark.parametrize("value, message", [
    ("tmp", "temp_prefix must be a key prefix ending in '/', such as '_fluxfs-tmp/', not 'tmp'"),
    ("/", "temp_prefix must be a key prefix ending in '/', such as '_fluxfs-tmp/', not '/'"),
])
def test_bad_temp_prefix(flux_server, value, message):
    with pytest.raises(ValueError) as bad:
        make_fs(flux_server, temp_prefix=value)
    assert str(bad.value) == message


def test_bad_job_id(flux_server):
    with pytest.raises(ValueError, match=r"job_id must be 1-100 letters, digits, '.', '_' or '-' .*not 'a/b'"):
        make_fs(flux_server, job_id="a/b")


def test_configured_prefix_from_the_command_line(flux_server, bucket, fs):
    key = tempnames.temp_key("1-host-1-dead", "upload", "scratch/")
    fs.pipe_file(f"{bucket}/{key}", b"left", metadata=tempnames.marker("1-host-1-dead"))
    fs.pipe_file(f"{bucket}/scratch/notes.txt", b"mine")
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = main(["--endpoint", flux_server.url, "-o", "temp_prefix=scratch/", "cleanup", f"flux://{bucket}",
                     "--older-than", "0"])
    assert code == 0, err.getvalue()
    assert "removed 1 temporary object(s)" in err.getvalue()
    assert f"left 1 object(s) under scratch/ that fluxfs did not create (not named and marked as its " \
           f"temporaries): {bucket}/scratch/notes.txt" in err.getvalue()
    assert flux_server.list_names(bucket) == ["scratch/notes.txt"]


def test_stranded_composite_is_marked_and_cleaned(flux_server, bucket):
    """A composite a batched read could not delete (delete denied) carries the marker: cleanup takes it."""
    flux_server.generate(bucket, 64, size=10, prefix="d/")
    fs = make_fs(flux_server, read_concurrency=1)
    infos = [i for b in fs.iter_objects(f"{bucket}/d") for i in b]
    flux_server.configure(deny_ops={"delete"})
    with pytest.warns(RuntimeWarning, match="compose is not permitted"):
        assert len(fs.cat_objects(infos)) == 64
    flux_server.configure(deny_ops=[])
    stranded = flux_server.list_names(bucket, "_fluxfs-tmp/compose/")
    assert stranded and fs.find(f"{bucket}/_fluxfs-tmp/") == []
    report = temporaries.cleanup_report(make_fs(flux_server), bucket)
    assert (report.removed, report.not_ours) == (len(stranded), [])
    temporaries.registry(fs).live.clear()  # gone: nothing for the exit hook to retry

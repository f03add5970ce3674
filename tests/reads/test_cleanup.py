"""Temporary objects: the registry, deletion at interpreter exit, and `cleanup` of crashed jobs' leftovers."""
from __future__ import annotations

import contextlib
import io
import subprocess
import sys
import textwrap
import time

import pytest

from fluxfs import temporaries
from fluxfs.cli import main
from fluxfs.gcs import bridge, tempnames
from fluxfs.gcs.timestamps import parse_timestamp
from tests.conftest import make_fs
from tests.reads.conftest import temp_names


def test_cleanup_older_than_spares_fresh_temporaries_of_a_long_running_job(gcs_server, any_bucket, other):
    """A job started 2 h ago still writes temporaries: `older_than="1h"` judges each by its own time, so
    the ones it wrote just now stay (they went when the job's start was what counted)."""
    fs = make_fs(gcs_server)
    old_job = f"{int(time.time()) - 7200}-host-1-abcd"
    new_job = tempnames.new_job_id()
    fresh = sorted([f"{any_bucket}/{tempnames.temp_key(old_job, 'compose')}" for _ in range(3)]
                   + [f"{any_bucket}/{tempnames.temp_key(new_job, 'parts')}"])
    for p in fresh:  # as a job leaves them: named and marked
        other.pipe_file(p, b"in use", metadata=tempnames.marker(tempnames.job_of(p.split("/", 1)[1])))
    other.pipe(f"{any_bucket}/data/keep", b"user data")
    assert temporaries.cleanup(fs, f"flux://{any_bucket}", older_than="1h") == 0
    assert temp_names(gcs_server, fs, any_bucket) == [p.split("/", 1)[1] for p in fresh]
    assert temporaries.cleanup(fs, any_bucket) == 4   # no age: every one not in use here
    assert temp_names(gcs_server, fs, any_bucket) == []
    assert fs.cat(f"{any_bucket}/data/keep") == b"user data"


def test_cleanup_older_than_removes_what_was_written_long_ago(flux_server, bucket):
    """`fluxfs cleanup --older-than 1h`: temporaries and orphaned upload records written 2 h ago go whatever
    their job id says; those written now stay, even under a job id 2 h old; a user's object stays."""
    fs = make_fs(flux_server)
    old_job, new_job = f"{int(time.time()) - 7200}-host-1-abcd", tempnames.new_job_id()
    aged = [tempnames.temp_key(new_job, "compose"), tempnames.temp_key(old_job, "parts"),
            tempnames.temp_key(new_job, "multipart")]   # the last: an upload's record, its upload gone
    fresh = [tempnames.temp_key(old_job, "compose"), tempnames.temp_key(old_job, "multipart")]
    for key in aged + fresh:
        fs.pipe_file(f"{bucket}/{key}", b"", metadata=tempnames.marker(tempnames.job_of(key)))
    fs.pipe_file(f"{bucket}/_fluxfs-tmp/notes.txt", b"mine")
    for key in aged + ["_fluxfs-tmp/notes.txt"]:
        flux_server.backdate(bucket, key, 7200)
    listed = {i["name"]: i for i in bridge.run(fs, temporaries._list_temp, fs, bucket)}
    assert all(time.time() - parse_timestamp(listed[k]["timeCreated"]).timestamp() > 7100 for k in aged)
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        code = main(["--endpoint", flux_server.url, "cleanup", f"flux://{bucket}", "--older-than", "1h"])
    err = err.getvalue()
    assert code == 0 and "removed 3 temporary object(s) and aborted 0 unfinished upload(s)" in err, err
    assert "_fluxfs-tmp/notes.txt" in err   # named as not fluxfs's, and kept
    assert flux_server.list_names(bucket) == sorted(fresh + ["_fluxfs-tmp/notes.txt"])
    with pytest.raises(KeyError, match=f"No such object: {bucket}/gone"):   # the control names what is missing
        flux_server.backdate(bucket, "gone", 60)


def test_cleanup_spares_objects_this_process_still_uses(flux_server, fs, bucket):
    mine = f"{bucket}/{tempnames.temp_key(fs.job_id, 'compose')}"
    temporaries.register(fs, mine)
    make_fs(flux_server).pipe_file(mine, b"in use", metadata=tempnames.marker(fs.job_id))
    try:
        assert temporaries.cleanup(fs, bucket) == 0
        assert flux_server.list_names(bucket, "_fluxfs-tmp/") == [mine.split("/", 1)[1]]
    finally:
        assert bridge.run(fs, temporaries.delete, fs, mine) is True
    assert flux_server.list_names(bucket, "_fluxfs-tmp/") == []
    assert len(temporaries.registry(fs)) == 0


def test_parse_age():
    assert temporaries.parse_age("90s") == 90 and temporaries.parse_age("1h") == 3600
    assert temporaries.parse_age(5) == 5.0
    assert temporaries.parse_age(None) is None
    with pytest.raises(ValueError, match="cannot read age"):
        temporaries.parse_age("an hour")


@pytest.mark.slow
def test_registered_objects_are_deleted_at_interpreter_exit(flux_server, bucket):
    script = textwrap.dedent(f"""
        from fluxfs import FluxFileSystem, temporaries
        from fluxfs.gcs import tempnames
        fs = FluxFileSystem(endpoint_url={flux_server.url!r}, token="anon", skip_instance_cache=True,
                            multipart="resumable")
        for i in range(3):
            path = "{bucket}/" + tempnames.temp_key(fs.job_id, "compose")
            temporaries.register(fs, path)          # as compose_reads does before composing
            fs.pipe(path, b"temporary")
        print(len(temporaries.registry(fs)))
        # exit without deleting: the atexit hook must
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "3"
    assert flux_server.list_names(bucket, "_fluxfs-tmp/") == []


def test_registry_is_per_process_after_fork(fs):
    import os

    temporaries.register(fs, "b/_fluxfs-tmp/compose/x/y")
    try:
        pid = os.fork()
        if pid == 0:  # child: the parent's temporaries are not ours to delete
            os._exit(0 if len(temporaries.registry(fs)) == 0 else 1)
        _, status = os.waitpid(pid, 0)
        assert os.WEXITSTATUS(status) == 0
    finally:
        temporaries.release(fs, "b/_fluxfs-tmp/compose/x/y")

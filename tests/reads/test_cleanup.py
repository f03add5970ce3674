"""Temporary objects: the registry, deletion at interpreter exit, and `cleanup` of crashed jobs' leftovers."""
from __future__ import annotations

import subprocess
import sys
import textwrap
import time

import pytest

from fluxfs import temporaries
from fluxfs.gcs import bridge, tempnames
from tests.conftest import make_fs
from tests.reads.conftest import temp_names


def test_cleanup_removes_leftovers_older_than(gcs_server, any_bucket, other):
    fs = make_fs(gcs_server)
    old_job = f"{int(time.time()) - 7200}-host-1-abcd"
    new_job = tempnames.new_job_id()
    old = [f"{any_bucket}/{tempnames.temp_key(old_job, 'compose')}" for _ in range(3)]
    new = f"{any_bucket}/{tempnames.temp_key(new_job, 'parts')}"
    for p in old + [new]:  # as a crashed job left them: named and marked
        other.pipe_file(p, b"leftover", metadata=tempnames.marker(tempnames.job_of(p.split("/", 1)[1])))
    other.pipe(f"{any_bucket}/data/keep", b"user data")
    assert temporaries.cleanup(fs, f"flux://{any_bucket}", older_than="1h") == 3
    assert temp_names(gcs_server, fs, any_bucket) == [new.split("/", 1)[1]]
    assert temporaries.cleanup(fs, any_bucket) == 1
    assert temp_names(gcs_server, fs, any_bucket) == []
    assert fs.cat(f"{any_bucket}/data/keep") == b"user data"


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
    assert temporaries.parse_age("90s") == 90 and temporaries.parse_age("1h") == 3600 and temporaries.parse_age(5) == 5.0
    assert temporaries.parse_age(None) is None
    with pytest.raises(ValueError, match="cannot read age"):
        temporaries.parse_age("an hour")


def test_registered_objects_are_deleted_at_interpreter_exit(flux_server, bucket):
    script = textwrap.dedent(f"""
        from fluxfs import FluxFileSystem, temporaries
        from fluxfs.gcs import tempnames
        fs = FluxFileSystem(endpoint_url={flux_server.url!r}, token="anon", skip_instance_cache=True, multipart="off")
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

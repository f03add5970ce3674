"""FluxFileSystem as an fsspec citizen: URLs, storage_options, env config, pickling, fork safety."""
from __future__ import annotations

import multiprocessing
import os
import pickle
import subprocess
import sys

import fsspec
import pytest

from fluxfs import FluxFileSystem
from tests.conftest import make_fs


def test_url_to_fs_passes_storage_options(flux_server, bucket):
    fs, path = fsspec.url_to_fs(f"flux://{bucket}/dir/key.bin", endpoint_url=flux_server.url,
                                token="anon", list_page_size=7, multipart="compose")
    assert isinstance(fs, FluxFileSystem)
    assert path == f"{bucket}/dir/key.bin"
    assert (fs.options.list_page_size, fs.options.multipart) == (7, "compose")
    with fsspec.open(f"flux://{bucket}/dir/key.bin", "wb", endpoint_url=flux_server.url, token="anon") as f:
        f.write(b"payload")
    assert fs.cat(path) == b"payload"


def test_emulator_host_env_var_is_the_endpoint(flux_server, bucket):
    """Like gcsfs, STORAGE_EMULATOR_HOST points the filesystem at a server; FSSPEC_FLUX_* set options."""
    code = (
        "import fsspec; fs = fsspec.filesystem('flux', token='anon');"
        f"fs.pipe('{bucket}/env', b'via-env'); print(fs.cat('{bucket}/env').decode(), fs.options.list_page_size)"
    )
    env = dict(os.environ, STORAGE_EMULATOR_HOST=flux_server.url, FSSPEC_FLUX_LIST_PAGE_SIZE="11")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["via-env", "11"]


def test_bad_options_are_rejected_with_clear_errors(flux_server):
    with pytest.raises(ValueError, match=r"multipart must be 'xml', 'compose' or 'resumable', not 's3'"):
        make_fs(flux_server, multipart="s3")
    with pytest.raises(ValueError, match="list_page_size must be between 1 and 1000"):
        make_fs(flux_server, list_page_size=5000)
    with pytest.raises(ValueError, match="unknown operation kinds in retry option"):
        make_fs(flux_server, retry={"lists": {"max_attempts": 2}})


def test_pickled_filesystem_keeps_options_and_works(flux_server, bucket):
    fs = make_fs(flux_server, list_page_size=9, retry={"read": {"max_attempts": 3}})
    fs.pipe(f"{bucket}/p", b"pickled")
    clone = pickle.loads(pickle.dumps(fs))
    assert clone.options.list_page_size == 9
    assert clone.options.retry_policy("read").max_attempts == 3
    assert clone.cat(f"{bucket}/p") == b"pickled"


def _child_reads(fs: FluxFileSystem, path: str, queue) -> None:
    try:
        queue.put((fs.cat(path), fs.job_id))
    except BaseException as exc:  # report, don't hang the parent
        queue.put((repr(exc), None))


def test_filesystem_used_before_fork_works_in_forked_child(flux_server, bucket):
    """DataLoader workers fork after the parent has used the filesystem (and its event loop)."""
    fs, _ = fsspec.url_to_fs(f"flux://{bucket}", endpoint_url=flux_server.url, token="anon")
    fs.pipe(f"{bucket}/forked", b"from-parent")
    assert fs.cat(f"{bucket}/forked") == b"from-parent"
    parent_job = fs.job_id
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    proc = ctx.Process(target=_child_reads, args=(fs, f"{bucket}/forked", queue))
    proc.start()
    data, child_job = queue.get(timeout=60)
    proc.join(30)
    assert data == b"from-parent"
    assert child_job != parent_job, "temporary-object job ids must differ between processes"


def test_local_endpoint_needs_no_credentials(flux_server, bucket):
    """A server on loopback gets anonymous access by default: no credential chain, no metadata-server probe."""
    fs = FluxFileSystem(endpoint_url=flux_server.url, skip_instance_cache=True)
    assert fs.credentials.method == "anon"
    fs.pipe(f"{bucket}/anon", b"ok")
    assert fs.cat(f"{bucket}/anon") == b"ok"


def test_batch_read_concurrency_is_the_option_or_its_default(flux_server):
    from fluxfs.options import DEFAULT_READ_CONCURRENCY

    assert make_fs(flux_server, read_concurrency=7).batch_read_concurrency == 7
    assert make_fs(flux_server).batch_read_concurrency == DEFAULT_READ_CONCURRENCY


def test_asynchronous_instance_runs_on_the_callers_loop(flux_server, bucket):
    """`asynchronous=True` (fsspec's async API): no loop thread of its own, the `_` methods awaited directly."""
    import asyncio

    async def main() -> tuple:
        fs = FluxFileSystem(endpoint_url=flux_server.url, token="anon", asynchronous=True, skip_instance_cache=True)
        assert fs.loop is None
        await fs._pipe_file(f"{bucket}/async", b"awaited")
        got = (await fs._cat_file(f"{bucket}/async"), await fs._cat_objects([{"name": f"{bucket}/async"}]))
        await (await fs._set_session()).close()
        return got

    assert asyncio.run(main()) == (b"awaited", {f"{bucket}/async": b"awaited"})

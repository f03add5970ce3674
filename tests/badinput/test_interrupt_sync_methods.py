"""Bad-input catalogue: Ctrl-C in fsspec's generated blocking methods (`pipe_file`, `put_file`, `rm`, ...) stops
the call within about a second and leaves no unfinished upload (docs/bad-inputs.md, "Ctrl-C").

These methods are generated from the async `_methods`; fsspec's own `sync` leaves the coroutine running when
the caller is interrupted, so a process ended by Ctrl-C left its XML multipart upload on the server. Each
test runs the call in a Python subprocess against a slowed-down server (in a process of its own) and sends
SIGINT mid-call. A second test checks that every such method of FluxFileSystem is the bridge's wrapper.
"""
from __future__ import annotations

import inspect
import os
import pickle
import re
import sys
import textwrap
import time

import pytest

from fluxfs.core import FluxFileSystem
from fluxfs.gcs import bridge
from fluxfs.gcs.tempnames import TEMP_PREFIX
from tests._sigint import bucket, interrupt_when, server  # noqa: F401 (fixtures)
from tests.conftest import make_fs

STOP_WITHIN = 1.5  # seconds from SIGINT to exit
MIB = 1024 * 1024


def _interrupt(server, call: str, ready) -> tuple[int, str, float]:
    """Run `call` (Python, with `fs` a FluxFileSystem on `server`) in a subprocess, SIGINT it once `ready()`;
    returns (exit code, stderr, seconds from SIGINT to exit)."""
    code = textwrap.dedent(f"""
        from fluxfs.core import FluxFileSystem
        fs = FluxFileSystem(endpoint_url={server.url!r}, token="anon", part_size=5 * 2**20, write_concurrency=2)
        {call}
    """)
    return interrupt_when([sys.executable, "-c", code], ready, what="the call",
                          cwd=os.path.dirname(os.path.dirname(os.path.dirname(__file__))))


def _uploading(server, bucket):
    """True once an XML multipart upload is open and has parts on the way (the write is under way)."""
    return lambda: bool(server.multipart_uploads(bucket)) and server.stats()["requests"].get("write", 0) >= 3


def _assert_stopped_cleanly(server, bucket, key, exit_code, err, took):
    assert exit_code != 0 and "KeyboardInterrupt" in err, err
    assert took < STOP_WITHIN, f"took {took:.1f} s to stop after Ctrl-C"
    server.configure(profile="local")
    assert server.multipart_uploads(bucket) == [], "an unfinished XML multipart upload was left on the server"
    assert server.list_names(bucket, TEMP_PREFIX) == []
    assert key not in server.list_names(bucket)


def test_ctrl_c_during_pipe_file_aborts_its_upload(server, bucket):
    server.configure(bandwidth_mbps=1)  # 40 MiB at 2 parts x 1 MB/s: ~20 s
    code, err, took = _interrupt(server, f"fs.pipe_file('{bucket}/big.bin', b'x' * (40 * 2**20))",
                                 _uploading(server, bucket))
    _assert_stopped_cleanly(server, bucket, "big.bin", code, err, took)


def test_ctrl_c_during_put_file_aborts_its_upload(server, bucket, tmp_path):
    local = tmp_path / "big.bin"
    local.write_bytes(os.urandom(40 * MIB))
    server.configure(bandwidth_mbps=1)
    code, err, took = _interrupt(server, f"fs.put_file({str(local)!r}, '{bucket}/up.bin')",
                                 _uploading(server, bucket))
    _assert_stopped_cleanly(server, bucket, "up.bin", code, err, took)
    assert local.read_bytes()  # the source is untouched


def test_ctrl_c_during_recursive_rm_stops_deleting(server, bucket):
    server.generate(bucket, 3000, size=1, prefix="many/")
    server.configure(latency_ms=200)  # 32 deletes in flight, ~160 a second: ~19 s for all
    server.reset_stats()

    def deleting() -> bool:
        return server.stats()["requests"].get("delete", 0) >= 64

    code, err, took = _interrupt(server, f"fs.rm('{bucket}/many', recursive=True)", deleting)
    assert code != 0 and "KeyboardInterrupt" in err, err
    assert took < STOP_WITHIN, f"took {took:.1f} s to stop after Ctrl-C"
    sent = server.stats()["requests"].get("delete", 0)
    time.sleep(0.5)
    # Nothing goes on deleting after the exit: no DELETE arrives once the process is gone (those the server had
    # received by then may still complete: it answers each after its latency, whether the client waits or not).
    assert server.stats()["requests"].get("delete", 0) == sent
    assert len(server.list_names(bucket, "many/")) >= 3000 - sent > 0


def _async_twins(cls) -> dict[str, str]:
    """{blocking name: async name} for every public method of `cls` whose `_name` is a coroutine or async generator."""
    out = {}
    for name in dir(cls):
        if not re.match("_[^_]", name) or not hasattr(cls, name[1:]):
            continue
        fn = getattr(cls, name)
        if inspect.iscoroutinefunction(fn) or inspect.isasyncgenfunction(fn):
            out[name[1:]] = name
    return out


# Written by hand, each a call to bridge.run / bridge.iterate / stream.iter_cat_objects (which uses both).
HAND_WRITTEN = {"cat_objects", "iter_objects", "iter_cat_objects"}


def test_every_generated_blocking_method_is_the_bridges(flux_server):
    twins = _async_twins(FluxFileSystem)
    for name in ("pipe_file", "put_file", "cat_file", "info", "rm", "get_file", "cp_file", "ls", "exists",
                 "walk", "call", "mv", "find"):
        assert name in twins
    not_bridged = sorted(n for n in twins
                         if n not in HAND_WRITTEN and not bridge.is_bridged(getattr(FluxFileSystem, n)))
    assert not_bridged == []
    # Instances (fresh, from fsspec's cache, unpickled) carry no per-instance wrappers of fsspec's `sync`.
    fs = make_fs(flux_server)
    cached = FluxFileSystem(endpoint_url=flux_server.url, token="anon")
    again = FluxFileSystem(endpoint_url=flux_server.url, token="anon")
    assert cached is again
    for instance in (fs, cached, pickle.loads(pickle.dumps(fs))):
        assert not [n for n in twins if n in vars(instance)], sorted(n for n in twins if n in vars(instance))
        assert all(bridge.is_bridged(getattr(type(instance), n)) for n in twins if n not in HAND_WRITTEN)


def test_generated_methods_work_and_refuse_the_loop_thread(server, bucket):
    fs = make_fs(server)
    fs.pipe_file(f"{bucket}/a", b"abc")
    assert fs.cat_file(f"{bucket}/a") == b"abc" and fs.info(f"{bucket}/a")["size"] == 3

    async def on_loop():
        return fs.info(f"{bucket}/a")

    with pytest.raises(RuntimeError, match="info is blocking"):
        bridge.run(fs, on_loop)


def test_a_coroutine_cancelled_from_inside_is_raised_not_a_silent_none(server, bucket, tmp_path):
    """fsspec's `sync` catches Exception only, so a CancelledError raised inside the coroutine (gcsfs's own
    test forces one with a patched asyncio.wait) makes `get_file` return None with nothing downloaded; through
    the bridge the caller gets the CancelledError."""
    import asyncio

    from tests.conftest import make_fs

    fs = make_fs(server)
    fs.pipe_file(f"{bucket}/cancelled.txt", b"0123456789")

    async def cancelled_inside(*args, **kwargs):
        raise asyncio.CancelledError()

    fs._get_file = cancelled_inside  # the blocking method finds its coroutine by name on the instance
    out = tmp_path / "out.txt"
    with pytest.raises(asyncio.CancelledError):
        fs.get_file(f"{bucket}/cancelled.txt", str(out))
    assert not out.exists()

"""Zonal buckets read over gRPC BidiReadObject and written as appendable objects over BidiWriteObject, on a server
answering gRPC (tests/zonal/conftest.py); a regional bucket keeps HTTP."""
from __future__ import annotations

import base64
import hashlib
import io
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fluxfs import FluxFileSystem
from fluxfs.errors import ObjectChanged, RequestTimeout, ServerUnreachable
from tests.conftest import make_fs, wait_for
from tests.zonal.conftest import zonal_fs

ROOT = Path(__file__).resolve().parents[2]

MiB = 2**20


def test_whole_and_ranged_reads_round_trip(zonal):
    server, bucket = zonal
    fs = zonal_fs(server)
    data = os.urandom(20 * MiB + 123)
    fs.pipe_file(f"{bucket}/big", data)
    assert fs.cat_file(f"{bucket}/big") == data
    assert fs.cat_file(f"{bucket}/big", 5, 9 * MiB) == data[5:9 * MiB]
    assert fs.cat_file(f"{bucket}/big", -100) == data[-100:]
    assert fs.cat_ranges([f"{bucket}/big"] * 2, [0, 10 * MiB], [3, 10 * MiB + 7]) == [data[:3],
                                                                                   data[10 * MiB:10 * MiB + 7]]
    with fs.open(f"{bucket}/big", "rb", block_size=4 * MiB) as f:
        f.seek(7 * MiB + 1)
        assert f.read(5 * MiB) == data[7 * MiB + 1:12 * MiB + 1]
        f.seek(0)
        assert f.read() == data
    with fs.open(f"{bucket}/big", "rb", cache_type="bytes") as f:  # fsspec's cache fed by _fetch_range
        f.seek(3)
        assert f.read(100) == data[3:103]


def test_large_read_spreads_over_streams_and_resumes_cut_ones(zonal):
    """A large read goes out on several streams at once (one stream's throughput is bounded), and a stream cut
    mid-range is read again from the byte it reached: the bytes are exact, none is sent twice."""
    server, bucket = zonal
    if server.server is None:
        pytest.skip("stats and injected faults are the embedded server's")
    srv = server.server
    fs = zonal_fs(server)
    data = os.urandom(40 * MiB + 5)
    fs.pipe_file(f"{bucket}/big", data)
    srv.reset_stats()
    assert fs.cat_file(f"{bucket}/big") == data
    st = srv.stats()
    assert st["peak_in_flight"]["read"] >= 3  # 6 ranges of 8 MiB: the 5 after the first side by side
    assert st["bytes_out"] == len(data)
    with fs.open(f"{bucket}/big", "rb") as f:
        f.seek(3 * MiB)
        assert f.read(12 * MiB) == data[3 * MiB:15 * MiB]
    srv.configure(cut_replies=2, fail_ops="read")
    srv.reset_stats()
    assert fs.cat_file(f"{bucket}/big") == data
    st = srv.stats()
    assert st["faults"]["read"] == 2
    assert st["bytes_out"] == len(data)


def test_many_ranges_of_one_object(zonal):
    server, bucket = zonal
    fs = zonal_fs(server)
    data = os.urandom(3 * MiB)
    fs.pipe_file(f"{bucket}/o", data)
    spans = [(i * 29_000, i * 29_000 + 1000 + i) for i in range(100)]
    got = fs.read_ranges(f"{bucket}/o", spans, max_gap=0)
    assert list(got) == [data[a:b] for a, b in spans]
    buffers = [bytearray(b - a) for a, b in spans[:10]]
    fs.read_ranges(f"{bucket}/o", spans[:10], into=buffers, max_gap=0)
    assert [bytes(b) for b in buffers] == [data[a:b] for a, b in spans[:10]]


def test_read_ranges_of_a_generation_gone_is_object_changed(zonal):
    server, bucket = zonal
    fs = zonal_fs(server)
    fs.pipe_file(f"{bucket}/o", b"first version")
    old = fs.info(f"{bucket}/o")["generation"]
    fs.pipe_file(f"{bucket}/o", b"second version")
    gone = str(int(old) + 7919)  # a generation the object never had (the testbench keeps replaced ones readable)
    with pytest.raises(ObjectChanged, match=f"{bucket}/o"):
        fs.read_ranges(f"{bucket}/o", [(0, 5)], generation=gone)
    with pytest.raises(ObjectChanged, match=f"{bucket}/o"):
        fs.read_ranges(f"{bucket}/o", [(0, 5), (9, 12)], generation=gone, max_gap=0)
    assert fs.read_ranges(f"{bucket}/o", [(0, 6)]) == [b"second"]


def test_missing_object_is_file_not_found_naming_it(zonal):
    server, bucket = zonal
    fs = zonal_fs(server)
    with pytest.raises(FileNotFoundError, match=f"{bucket}/nope"):
        fs.cat_file(f"{bucket}/nope")


def test_cat_objects_of_200_small_objects(zonal):
    server, bucket = zonal
    fs = zonal_fs(server)
    data = {f"{bucket}/s/{i:03d}": os.urandom(100 + i) for i in range(200)}
    fs.pipe(data)
    infos = listed(server, f"{bucket}/s")
    assert fs.cat_objects(infos) == data
    streamed = {}
    for batch in fs.iter_cat_objects(infos, buffer_bytes=4096):
        streamed.update(batch)
    assert streamed == data


def test_small_objects_are_read_side_by_side(zonal):
    """Many small objects are read with the filesystem's read concurrency in flight (each on a stream of its own),
    whether the caller gave their sizes (cat_objects) or not (cat of paths): 64 reads 32 at a time take two
    first-byte latencies (cat lists first: one more), where 8 at a time would take eight."""
    server, bucket = zonal
    if server.server is None:
        pytest.skip("latency is the embedded server's")
    srv = server.server
    fs = zonal_fs(server, read_concurrency=32)
    data = {f"{bucket}/p/{i:03d}": os.urandom(1000 + i) for i in range(64)}
    fs.pipe(data)
    infos = listed(server, f"{bucket}/p")
    assert fs.cat_file(infos[0]["name"]) == data[infos[0]["name"]]  # the bucket's layout known, the channel up
    srv.configure(latency_ms=400)
    for how, read in (("cat_objects", lambda: fs.cat_objects(infos)), ("cat", lambda: fs.cat(sorted(data)))):
        t0 = time.monotonic()
        assert {k.split("://")[-1]: v for k, v in read().items()} == data
        assert time.monotonic() - t0 < 7 * 0.4, how  # 8 at a time: 8 latencies (and cat's listing one more)


def test_writes_are_finalized_objects(zonal, tmp_path):
    server, bucket = zonal
    fs = zonal_fs(server)
    data = os.urandom(5 * MiB + 7)
    with fs.open(f"{bucket}/w", "wb", block_size=MiB) as f:
        for i in range(0, len(data), 700_000):
            f.write(data[i:i + 700_000])
    assert fs.cat_file(f"{bucket}/w") == data and f.object_info["size"] == len(data)
    if server.server is not None:  # the embedded server hashes an appendable object's bytes as they persist
        fs.invalidate_cache()
        assert fs.info(f"{bucket}/w")["md5Hash"] == base64.b64encode(hashlib.md5(data).digest()).decode()
    fs.pipe_file(f"{bucket}/p", b"tiny")
    assert fs.cat_file(f"{bucket}/p") == b"tiny"
    local = tmp_path / "local.bin"
    local.write_bytes(data[:MiB])
    fs.put_file(str(local), f"{bucket}/put")
    assert fs.cat_file(f"{bucket}/put") == data[:MiB]
    with pytest.raises(FileExistsError, match=f"{bucket}/p"):
        fs.pipe_file(f"{bucket}/p", b"again", mode="create")
    with pytest.raises(PermissionError, match=f"{bucket}/p.*finalized"):  # finalized: no more appends
        fs.open(f"{bucket}/p", "ab")


def test_torch_save_round_trips(zonal):
    torch = pytest.importorskip("torch")
    server, bucket = zonal
    fs = zonal_fs(server)
    state = {"w": torch.arange(1000, dtype=torch.float32)}
    with fs.open(f"{bucket}/ckpt.pt", "wb") as f:
        torch.save(state, f)
    with fs.open(f"{bucket}/ckpt.pt", "rb") as f:
        assert torch.equal(torch.load(f)["w"], state["w"])


def test_a_write_streams_from_its_first_two_mib(zonal):
    # The appendable stream opens once 2 MiB are written, not a whole part (8 MiB): GCS takes the bytes from the
    # start of the write, as it does from a client writing straight to the stream.
    server, bucket = zonal
    fs = zonal_fs(server)
    data, reader = os.urandom(3 * MiB), zonal_fs(server)

    def streamed() -> bool:
        reader.invalidate_cache()
        return reader.exists(f"{bucket}/early") and reader.cat_file(f"{bucket}/early") == data[:2 * MiB]

    with fs.open(f"{bucket}/early", "wb") as f:
        f.write(data)
        wait_for(streamed, "the first 2 MiB readable, unfinalized, while the write goes on", timeout=20)
    assert fs.cat_file(f"{bucket}/early") == data


def test_failed_write_leaves_no_object(zonal):
    server, bucket = zonal
    fs = zonal_fs(server)
    with pytest.raises(RuntimeError):
        with fs.open(f"{bucket}/half", "wb", block_size=MiB) as f:
            f.write(os.urandom(3 * MiB))  # parts already appended to the unfinalized object
            raise RuntimeError("interrupted")
    fs.invalidate_cache()
    assert not fs.exists(f"{bucket}/half")


def test_append_is_native_and_readable_unfinalized(zonal):
    server, bucket = zonal
    fs = zonal_fs(server)
    with fs.open(f"{bucket}/log", "ab") as f:
        f.write(b"hello ")
    assert fs.cat_file(f"{bucket}/log") == b"hello "  # unfinalized, readable
    with fs.open(f"{bucket}/log", "ab") as f:
        f.write(b"world" * 1000)
    assert fs.cat_file(f"{bucket}/log") == b"hello " + b"world" * 1000
    assert fs.info(f"{bucket}/log")["size"] == 6 + 5000
    # A ranged read right after it grows sees the new bytes (a stream opened before knows only the size then).
    generation = fs.info(f"{bucket}/log")["generation"]
    assert fs.read_ranges(f"{bucket}/log", [(0, 6)], generation=generation) == [b"hello "]
    with fs.open(f"{bucket}/log", "ab") as f:
        f.write(b"!")
    whole = b"hello " + b"world" * 1000 + b"!"
    assert fs.read_ranges(f"{bucket}/log", [(5000, 5007)], generation=generation) == [whole[5000:5007]]


def listed(server, path: str) -> list[dict]:
    """Info dicts of the objects under `path` (the testbench has no JSON folders API: listed as a flat bucket)."""
    lister = zonal_fs(server, bucket_types={"*": "standard"}) if server.server is None else zonal_fs(server)
    return list(lister.find(path, detail=True).values())


def test_forked_workers_use_their_own_channel(zonal):
    """A process that read and wrote over gRPC forks workers (a DataLoader's, a fork Pool's): each builds its own
    channel and reads the right bytes, and the parent's still works. Run in a fresh interpreter
    (tests/zonal/_fork_child.py): this test process also hosts the embedded server, whose gRPC threads a training
    process never has and which would be forked with the workers."""
    server, bucket = zonal
    data = {f"{bucket}/f{i}": os.urandom(1000 + i) for i in range(4)}
    zonal_fs(server).pipe(data)
    declared = {**server.options.get("bucket_types", {}), bucket: "zonal"}  # over gRPC from the first read
    spec = {"http_url": server.http_url, "grpc_endpoint": server.grpc_endpoint,
            "options": {**server.options, "bucket_types": declared}, "paths": list(data)}
    proc = subprocess.run([sys.executable, "-m", "tests.zonal._fork_child", json.dumps(spec)], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got["parent_clients"] >= 1  # the parent had a channel open when it forked
    assert got["children_started_with"] == [0] * len(data)  # no child started with its parent's client
    assert got["children_read"] == [hashlib.sha256(b).hexdigest() for b in data.values()]
    assert got["parent_after"] == hashlib.sha256(data[f"{bucket}/f1"]).hexdigest()  # the parent's still works


def test_unreachable_grpc_endpoint_is_named(zonal):
    server, bucket = zonal
    with socket_closed() as port:
        # The layout declared: a read that does not know it yet goes over HTTP rather than wait for it.
        fs = zonal_fs(server, grpc_endpoint=f"127.0.0.1:{port}", bucket_types={bucket: "zonal"})
        with pytest.raises(ServerUnreachable, match=f"127.0.0.1:{port}.*grpc_endpoint"):
            fs.cat_file(f"{bucket}/anything")


@pytest.mark.parametrize("transport", ["http", "grpc"])
def test_connect_timeout_bounds_both_transports(zonal, transport):
    """One `connect_timeout` bounds how long connection failures are retried, over HTTP (the session middleware)
    and over gRPC (the channel's readiness wait) alike: an endpoint where nothing listens fails with
    ServerUnreachable naming it within the value given (0.2 s, against 1.5 s by default; gRPC waited 5 s)."""
    from tests.badinput.test_unreachable import assert_one_clear_line

    server, bucket = zonal
    with socket_closed() as port:
        if transport == "http":
            fs = FluxFileSystem(endpoint_url=f"http://127.0.0.1:{port}", token="anon", skip_instance_cache=True,
                                connect_timeout=0.2)
        else:
            fs = zonal_fs(server, grpc_endpoint=f"127.0.0.1:{port}", bucket_types={bucket: "zonal"},
                          connect_timeout=0.2)
        import fluxfs.zonal.grpc_reads  # noqa: F401 - imported before the clock starts
        start = time.monotonic()
        with pytest.raises(ServerUnreachable) as info:
            fs.cat_file(f"{bucket}/anything")
        elapsed = time.monotonic() - start
    assert elapsed < 1.0, elapsed  # the default would take 1.25 s (HTTP) and 1.5 s (gRPC)
    if transport == "http":
        assert_one_clear_line(info.value, f"cannot reach the storage server at http://127.0.0.1:{port}")
    else:
        assert str(info.value).startswith(f"no gRPC server answered at 127.0.0.1:{port} within 0.2 s"), info.value


def test_regional_bucket_stays_http(flux_server, bucket):
    fs = make_fs(flux_server)  # zonal_transport="grpc" by default: a regional bucket is unaffected
    flux_server.reset_stats()
    fs.pipe_file(f"{bucket}/r", b"regional")
    assert fs.cat_file(f"{bucket}/r") == b"regional"
    with fs.open(f"{bucket}/r", "ab") as f:
        f.write(b"+")
    assert fs.cat_file(f"{bucket}/r") == b"regional+"
    assert flux_server.stats()["requests"].get("read", 0) >= 2


@pytest.mark.parametrize("option, value, named", [("zonal_transport", "udp", "zonal_transport"),
                                                  ("grpc_endpoint", "http://127.0.0.1:1", "grpc_endpoint"),
                                                  ("grpc_endpoint", "localhost", "grpc_endpoint")])
def test_bad_options_are_named(option, value, named):
    with pytest.raises(ValueError, match=named):
        FluxFileSystem(endpoint_url="http://127.0.0.1:1", token="anon", skip_instance_cache=True, **{option: value})


class socket_closed:
    """A local port nothing listens on."""

    def __enter__(self) -> int:
        import socket

        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        self.port = s.getsockname()[1]
        s.close()
        return self.port

    def __exit__(self, *exc) -> None:
        return None


def test_http_transport_on_zonal_is_an_option(zonal):
    server, bucket = zonal
    fs = zonal_fs(server, zonal_transport="http")
    fs_grpc = zonal_fs(server)
    fs_grpc.pipe_file(f"{bucket}/h", b"x" * 100)
    assert fs.cat_file(f"{bucket}/h") == b"x" * 100
    assert io.BytesIO(fs.cat_file(f"{bucket}/h", 10, 20)).read() == b"x" * 10


@pytest.mark.parametrize("span", [None, (0, 1000)], ids=["whole", "short-range"])
def test_reader_gives_up_when_the_stream_stalls(zonal, span):
    """A read stream that stops moving (the server stalled after some bytes) fails within a few `read_timeout`s
    with RequestTimeout naming the object, on a stream of its own (a whole object) and on the pooled one (a short
    range), instead of waiting forever."""
    from tests.badinput.test_stalls import QUICK, within

    server, bucket = zonal
    if server.server is None:
        pytest.skip("stalls are injected by the embedded server")
    fs = zonal_fs(server, read_timeout=1, retry=QUICK)
    fs.pipe_file(f"{bucket}/big", os.urandom(4 * MiB))
    assert len(fs.cat_file(f"{bucket}/big", 0, 10)) == 10  # over gRPC: the bucket's layout is known
    server.server.configure(stall_after=MiB if span is None else 10, fail_ops={"read"})
    box = within(30, lambda: fs.cat_file(f"{bucket}/big", *(span or ())))
    server.server.configure(stall_after=None)
    assert isinstance(box.get("error"), RequestTimeout), box
    assert str(box["error"]).startswith(f"{bucket}/big: timed out: the answer stalled for 1 s after "), box
    assert "(gRPC BidiReadObject)" in str(box["error"])
    assert box["elapsed"] < 10


@pytest.mark.parametrize("span, limit, attempts", [(None, 1, 2), ((0, 1000), 1, 2), (None, 0.5, 3)],
                         ids=["whole", "short-range", "whole-3-attempts"])
def test_a_stalled_read_fails_alike_over_http_and_grpc(zonal, span, limit, attempts):
    """One stall rule for both transports: each attempt fails once nothing moved for `read_timeout`, and the read
    retry policy's attempts decide how many there are; so a stalled read of a zonal object fails after as long
    over gRPC (a stream of its own for a whole object, the pooled one for a short range) as over HTTP."""
    from tests.badinput.test_stalls import within

    server, bucket = zonal
    if server.server is None:
        pytest.skip("stalls are injected by the embedded server")
    retry = {"max_attempts": attempts, "initial": 0.01, "maximum": 0.02}
    fs = zonal_fs(server, read_timeout=limit, retry=retry)
    fs.pipe_file(f"{bucket}/stalls", os.urandom(4 * MiB))
    fs.pipe_file(f"{bucket}/warm", b"x")
    elapsed = {}
    for transport in ("http", "grpc"):
        fs = zonal_fs(server, read_timeout=limit, retry=retry, zonal_transport=transport)
        assert fs.cat_file(f"{bucket}/warm") == b"x"  # connected, the layout known: only the stalled read is timed
        server.server.configure(stall_after=MiB if span is None else 10, fail_ops={"read"})
        try:
            box = within(30, lambda: fs.cat_file(f"{bucket}/stalls", *(span or ())))
        finally:
            server.server.configure(stall_after=None)
        assert isinstance(box.get("error"), RequestTimeout), (transport, box)
        assert str(box["error"]).startswith(f"{bucket}/stalls: timed out: "), box
        assert ("(gRPC BidiReadObject)" in str(box["error"])) == (transport == "grpc"), box
        elapsed[transport] = box["elapsed"]
    # Each attempt waits `limit` after the last byte (one clock, gcs/progress.ProgressClock): no transport gives up
    # sooner, nor waits longer per attempt, nor tries more or fewer times than the other (measured: 2.0 s each for
    # limit 1 and 2 attempts, whole or short, HTTP or gRPC). The upper bound leaves half a `limit` for a loaded
    # machine's scheduling (a gRPC read measured 2.04 s for 3 x 0.5 s), so it bounds the wait, not the attempt count.
    assert all(attempts * limit <= t < (attempts + 1) * limit + limit / 2 for t in elapsed.values()), elapsed
    assert abs(elapsed["http"] - elapsed["grpc"]) < limit, elapsed


def test_writer_gives_up_when_the_stream_stops_taking_bytes(zonal):
    """A write stream the server stops reading (stalled after 1 MiB) fails within a few `read_timeout`s with
    RequestTimeout naming the object, each retry stalling alike, and leaves no object behind."""
    from tests.badinput.test_stalls import QUICK, within

    server, bucket = zonal
    if server.server is None:
        pytest.skip("stalls are injected by the embedded server")
    fs = zonal_fs(server, read_timeout=1, retry=QUICK)
    fs.pipe_file(f"{bucket}/warm", b"x")  # over gRPC: the bucket's layout is known
    data = os.urandom(16 * MiB + 1)
    server.server.configure(stall_after=MiB, fail_ops={"write"})

    def write():
        with fs.open(f"{bucket}/big", "wb") as f:
            f.write(data)

    box = within(60, write)
    server.server.configure(stall_after=None)
    assert isinstance(box.get("error"), RequestTimeout), box
    assert str(box["error"]).startswith(f"{bucket}/big: timed out: the server took no bytes of the write for 1 s")
    assert box["elapsed"] < 20
    assert not fs.exists(f"{bucket}/big")


def test_only_the_read_streams_receive_loop_records_are_dropped():
    """What a pooled stream's close or a cancelled read leaves in the library's log comes from its receive loop
    (which hands every failure to the waiting reads): those records are dropped, by where they are logged, not by
    their text; the library's other warnings (a queue full for too long) still show."""
    import inspect
    import logging

    import fluxfs.zonal.grpc_pool  # noqa: F401 - installs the filter
    from google.cloud.storage.asyncio import _stream_multiplexer as mux

    assert "logger.warning" in inspect.getsource(mux._StreamMultiplexer._recv_loop)
    log = logging.getLogger(mux.__name__)

    def record(func: str, msg: str) -> logging.LogRecord:
        return log.makeRecord(log.name, logging.WARNING, mux.__file__, 1, msg, (), None, func=func)

    assert not log.filter(record("_recv_loop", "Stream multiplexer recv loop failed: 499 CANCELLED"))
    assert not log.filter(record("_recv_loop", "Received data for unregistered read_id: 7"))
    assert log.filter(record("_put_with_timeout",
                             "Queue full for too long. Dropping item to prevent multiplexer hang."))

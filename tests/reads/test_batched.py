"""Batched reads (`fs.cat`, `fs.cat_objects`): exact bytes, stale listings, faults, denial, cleanup."""
from __future__ import annotations

import asyncio
import random
import warnings

import pytest

from fluxfs.gcs.limits import MAX_COMPOSE_SOURCES
from fluxfs.reads.plan import plan, to_objs
from tests.conftest import make_fs
from tests.reads.conftest import temp_names


def _payload(i: int, size: int) -> bytes:
    return random.Random(i * 7919 + size).randbytes(size)


def _write(fs, bucket: str, sizes: list[int], prefix: str = "d/") -> dict[str, bytes]:
    data = {f"{bucket}/{prefix}o{i:05d}": _payload(i, n) for i, n in enumerate(sizes)}
    fs.pipe(data)
    return data


@pytest.fixture
def rfs(gcs_server, quick_retry):
    """The filesystem under test, on either server (simple uploads: fake-gcs has no XML multipart)."""
    return make_fs(gcs_server, multipart="resumable", retry=quick_retry)


@pytest.fixture
def no_temps(gcs_server, rfs, any_bucket):
    """After the test, the reserved prefix of the bucket is empty."""
    yield
    assert temp_names(gcs_server, rfs, any_bucket) == []


def _requests(flux_server) -> dict:
    return flux_server.stats()["requests"]


# -- round trips -------------------------------------------------------------------------------

@pytest.mark.parametrize("sizes", [
    pytest.param([0], id="one-empty"),
    pytest.param([1], id="one-1-byte"),
    pytest.param([0, 1, 0, 1, 0], id="empty-and-1-byte"),
    pytest.param([random.Random(3).choice([0, 1, 7, 100, 4096, 50_000]) for _ in range(33)], id="33-mixed"),
])
def test_cat_round_trip(rfs, any_bucket, no_temps, sizes):
    data = _write(rfs, any_bucket, sizes)
    assert rfs.cat(list(data)) == data
    rfs.find(f"{any_bucket}/d")  # listing cache filled: the compose path with listed metadata
    assert rfs.cat(list(data)) == data


def test_cat_objects_uses_listing_without_metadata_requests(flux_server, fs, bucket):
    data = _write(fs, bucket, [100 * (i % 7) for i in range(64)])
    infos = fs.find(f"{bucket}/d", detail=True).values()
    flux_server.reset_stats()
    out = fs.cat_objects(list(infos))
    assert out == data
    req = _requests(flux_server)
    # 64 objects = 2 composites: 2 compose + 2 GET + 2 delete, and nothing else.
    assert req.get("compose") == 2 and req.get("read") == 2 and req.get("delete") == 2, req
    assert flux_server.list_names(bucket, "_fluxfs-tmp/") == []


def test_ten_thousand_tiny_objects(flux_server, fs, bucket):
    from fluxfs.server.synthetic import synthetic_bytes

    n = 10_000
    flux_server.generate(bucket, n, size=(0, 64), prefix="tiny/", seed=5)
    infos = list(fs.find(f"{bucket}/tiny/", detail=True).values())
    assert len(infos) == n
    flux_server.reset_stats()
    out = fs.cat_objects(infos)
    assert len(out) == n
    for info in infos:
        key = info["name"].split("/", 1)[1]
        assert out[info["name"]] == synthetic_bytes(key, info["size"], 5)
    req = _requests(flux_server)
    assert sum(req.values()) / n < 0.1, req  # ~3 requests per 32 objects, not one per object
    assert flux_server.list_names(bucket, "_fluxfs-tmp/") == []


def test_duplicates_in_request(rfs, any_bucket, no_temps):
    data = _write(rfs, any_bucket, [10, 0, 3000, 5])
    paths = list(data)
    out = rfs.cat(paths + paths[::-1] + [paths[0]])
    assert out == data
    infos = list(rfs.find(f"{any_bucket}/d", detail=True).values())
    assert rfs.cat_objects(infos + infos + infos[:1]) == data


# -- listing older than the objects -------------------------------------------------------------

@pytest.mark.parametrize("on_error", ["raise", "omit", "return"])
def test_cat_after_find_sees_overwrites_and_deletes(rfs, other, any_bucket, no_temps, on_error):
    sizes = [random.Random(11).randint(0, 3000) for _ in range(40)]
    data = _write(rfs, any_bucket, sizes)
    paths = sorted(data)
    rfs.find(f"{any_bucket}/d")  # fills the listing cache: sizes, generations, crc32c now stale
    current = dict(data)
    current[paths[1]] = b"grown " * 500                              # bigger
    current[paths[2]] = b"shrunk"                                    # smaller
    current[paths[3]] = bytes(reversed(data[paths[3]])) + b"!"       # different size
    current[paths[4]] = b"x" * len(data[paths[4]])                   # same size, other bytes
    current[paths[39]] = b""                                         # emptied
    for p in (paths[1], paths[2], paths[3], paths[4], paths[39]):
        other.pipe(p, current[p])
    other.rm(paths[7])
    gone = current.pop(paths[7])
    assert gone
    if on_error == "raise":
        with pytest.raises(FileNotFoundError, match=paths[7].split("/", 1)[1]):
            rfs.cat(paths)
    else:
        out = rfs.cat(paths, on_error=on_error)
        if on_error == "omit":
            assert out == current
        else:
            assert isinstance(out.pop(paths[7]), FileNotFoundError)
            assert out == current
    # The cache was refreshed where it was wrong: the next cat needs no fallbacks and is still exact.
    assert rfs.cat([p for p in paths if p != paths[7]]) == current


def test_same_size_overwrite_caught_by_listed_crc32c(rfs, other, any_bucket, no_temps):
    """With an unpinned compose (fake-gcs ignores pins) only the crc32c tells a same-size change."""
    data = _write(rfs, any_bucket, [1000] * 10)
    infos = list(rfs.find(f"{any_bucket}/d", detail=True).values())
    victim = sorted(data)[5]
    other.pipe(victim, b"y" * 1000)
    _assert_listed_read(rfs.cat_objects(infos, on_error="return"), data, [victim])


def test_compensating_size_changes_caught_by_listed_crc32c(rfs, other, any_bucket, no_temps):
    """One object grows as another shrinks: the composite's size is as listed, the slices are not aligned."""
    data = _write(rfs, any_bucket, [500] * 8)
    infos = list(rfs.find(f"{any_bucket}/d", detail=True).values())
    a, b = sorted(data)[2], sorted(data)[5]
    other.pipe({a: b"A" * 600, b: b"B" * 400})
    _assert_listed_read(rfs.cat_objects(infos, on_error="return"), data, [a, b])


def _assert_listed_read(got: dict, listed: dict, changed: list) -> None:
    """`cat_objects` reads the listed generations: the changed objects are ObjectChanged (never another
    object's slice, nor their new bytes), the others their listed bytes."""
    from fluxfs.errors import ObjectChanged

    for name in changed:
        assert isinstance(got.pop(name), ObjectChanged)
    assert got == {k: v for k, v in listed.items() if k not in changed}


def test_cat_after_find_needs_no_metadata_requests(flux_server, fs, bucket):
    data = _write(fs, bucket, [10] * 100)
    paths = list(data)
    flux_server.reset_stats()
    assert fs.cat(paths) == data  # cold: metadata from one range listing, not per object
    req = _requests(flux_server)
    assert req["list"] == 1 and req["compose"] == 4, req
    fs.find(f"{bucket}/d")
    flux_server.reset_stats()
    assert fs.cat(paths) == data
    req = _requests(flux_server)
    assert "list" not in req and req["compose"] == 4 and req["read"] == 4, req


def test_objects_from_several_buckets(flux_server, fs, bucket):
    second = bucket + "x"
    flux_server.create_bucket(second)
    data = _write(fs, bucket, [10] * 40)
    data.update(_write(fs, second, [20] * 40))
    infos = list(fs.find(f"{bucket}/d", detail=True).values()) + list(fs.find(f"{second}/d", detail=True).values())
    assert fs.cat_objects(infos[::-1]) == data
    assert flux_server.list_names(second, "_fluxfs-tmp/") == []


def test_vanished_after_listing_precondition_path(flux_server, fs, bucket):
    data = _write(fs, bucket, [50] * 40)
    infos = list(fs.find(f"{bucket}/d", detail=True).values())
    victim = sorted(data)[20]
    make_fs(flux_server).rm(victim)
    flux_server.reset_stats()
    out = fs.cat_objects(infos, on_error="return")
    assert isinstance(out.pop(victim), FileNotFoundError)
    assert out == {k: v for k, v in data.items() if k != victim}
    # The group holding the victim failed its pinned compose; the other one composed fine.
    assert _requests(flux_server)["compose"] == 2
    assert flux_server.list_names(bucket, "_fluxfs-tmp/") == []


def test_on_error_checked(fs):
    with pytest.raises(ValueError, match="on_error"):
        fs.cat_objects([], on_error="ignore")


# -- when compose does not pay or is not allowed ---------------------------------------------------

def test_compose_denied_turns_compose_off_with_one_warning(flux_server, bucket):
    fs = make_fs(flux_server)
    data = _write(fs, bucket, [100] * 70)
    fs.find(f"{bucket}/d")
    flux_server.configure(deny_ops=["compose"])
    with pytest.warns(RuntimeWarning, match="compose is not permitted") as caught:
        assert fs.cat(list(data)) == data
    assert len([w for w in caught if "compose" in str(w.message)]) == 1
    flux_server.reset_stats()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert fs.cat(list(data)) == data
    assert _requests(flux_server).get("compose", 0) == 0
    assert flux_server.list_names(bucket, "_fluxfs-tmp/") == []


@pytest.mark.parametrize("options", [{"compose": False}, {"max_composite_size": 0}])
def test_compose_disabled_by_option(flux_server, bucket, options):
    fs = make_fs(flux_server, **options)
    data = _write(fs, bucket, [10] * 40)
    fs.find(f"{bucket}/d")
    flux_server.reset_stats()
    assert fs.cat(list(data)) == data
    assert _requests(flux_server).get("compose", 0) == 0


def test_big_objects_read_directly_with_parallel_ranges(flux_server, bucket):
    fs = make_fs(flux_server, compose_threshold=1000, multipart="resumable")
    data = _write(fs, bucket, [5, 7, 2000, 3000])
    big = b"".join(_payload(i, 2**20) for i in range(20))  # 20 MiB: three 8 MiB ranges
    fs.pipe(f"{bucket}/d/zbig", big)
    data[f"{bucket}/d/zbig"] = big
    fs.find(f"{bucket}/d")
    flux_server.reset_stats()
    assert fs.cat(list(data)) == data
    req = _requests(flux_server)
    # Two small ones composed (compose+GET+delete); two above the threshold and the big one (3 ranges) direct.
    assert req["compose"] == 1 and req["read"] == 1 + 2 + 3, req
    flux_server.reset_stats()
    assert fs.cat_file(f"{bucket}/d/zbig") == big
    assert fs.cat_file(f"{bucket}/d/zbig", start=100, end=9_000_000) == big[100:9_000_000]
    assert _requests(flux_server)["read"] == 3 + 2


def test_group_of_one_is_a_plain_get(flux_server, bucket):
    fs = make_fs(flux_server, max_composite_size=2000)
    data = _write(fs, bucket, [10, 3000])  # the big one is over the cap: the small one is alone
    fs.find(f"{bucket}/d")
    flux_server.reset_stats()
    assert fs.cat(list(data)) == data
    req = _requests(flux_server)
    assert req.get("compose", 0) == 0 and req["read"] == 2, req


def test_plan_never_overshoots():
    rnd = random.Random(1)
    infos = [{"name": f"b/k{i}", "size": rnd.choice([0, 1, 10, 999, 1000, 1001, 5000]), "generation": "1",
              "crc32c": "AAAAAA=="} for i in range(2000)]
    cap, threshold = 4000, 1000
    groups, direct = plan(to_objs(infos), cap, threshold)
    seen = [o.path for g in groups for o in g] + [o.path for o in direct]
    assert sorted(seen) == sorted(i["name"] for i in infos)
    for g in groups:
        assert 2 <= len(g) <= MAX_COMPOSE_SOURCES
        assert sum(o.size for o in g) <= cap
    assert all(o.size <= threshold for g in groups for o in g)


# -- faults and interruption -----------------------------------------------------------------------

def test_injected_faults_on_compose_get_and_delete(flux_server, bucket):
    fs = make_fs(flux_server, retry={"initial": 0.005, "maximum": 0.05})
    data = _write(fs, bucket, [random.Random(i).randint(0, 2000) for i in range(400)])
    infos = list(fs.find(f"{bucket}/d", detail=True).values())
    flux_server.configure(fail_rate=0.1, reset_rate=0.03, fail_ops=["compose", "read", "delete"])
    for _ in range(2):
        assert fs.cat_objects(infos) == data
    assert sum(flux_server.stats()["faults"].values()) > 0
    flux_server.configure(fail_rate=0.0, reset_rate=0.0)
    assert flux_server.list_names(bucket, "_fluxfs-tmp/") == []


def test_cancel_during_batch_deletes_composites(flux_server, fs, bucket):
    data = _write(fs, bucket, [100] * 640)
    infos = list(fs.find(f"{bucket}/d", detail=True).values())
    flux_server.configure(latency_ms=40)
    future = asyncio.run_coroutine_threadsafe(fs._cat_objects(infos), fs.loop)
    import time

    deadline = time.monotonic() + 10
    while flux_server.stats()["requests"].get("compose", 0) < 5 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert future.cancel(), "the batch ended before it could be cancelled"
    # The cancelled batch waits for its composes to answer, then deletes them.
    deadline = time.monotonic() + 10
    while (flux_server.list_names(bucket, "_fluxfs-tmp/") or compose_reads_busy(fs)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert flux_server.list_names(bucket, "_fluxfs-tmp/") == []
    flux_server.configure(latency_ms=0)
    assert fs.cat_objects(infos) == data


def compose_reads_busy(fs) -> bool:
    from fluxfs import temporaries

    return len(temporaries.registry(fs)) > 0


def test_keyboard_interrupt_during_cat_cleans_up(flux_server, fs, bucket):
    import _thread
    import threading

    data = _write(fs, bucket, [100] * 640)
    fs.find(f"{bucket}/d")
    flux_server.configure(latency_ms=200)  # compose, GET and delete each take >= 0.2 s
    in_call = threading.Event()

    def interrupt():
        if in_call.is_set():
            _thread.interrupt_main()

    timer = threading.Timer(0.3, interrupt)
    in_call.set()
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            fs.cat(list(data))
    finally:
        in_call.clear()
        timer.cancel()
    # cat re-raised only after the batch's temporaries were deleted.
    assert flux_server.list_names(bucket, "_fluxfs-tmp/") == []
    flux_server.configure(latency_ms=0)


def test_recursive_cat_of_a_prefix(rfs, any_bucket, no_temps):
    data = _write(rfs, any_bucket, [3, 0, 40], prefix="r/a/")
    data.update(_write(rfs, any_bucket, [5, 6], prefix="r/b/c/"))
    assert rfs.cat(f"{any_bucket}/r", recursive=True) == data


def test_cat_objects_rejects_bad_infos_and_accepts_urls(flux_server, fs, bucket):
    data = _write(fs, bucket, [4, 5])
    with pytest.raises(ValueError, match="info dicts with a 'name'"):
        fs.cat_objects([{"size": 3}])
    infos = [dict(i, name="flux://" + i["name"]) for i in fs.find(f"{bucket}/d", detail=True).values()]
    assert fs.cat_objects(infos) == data
    assert fs.cat_objects(list(data)) == data  # bare paths: read directly


def test_infos_without_crc32c_never_return_misaligned_slices(rfs, other, any_bucket, no_temps):
    """No listed crc32c to check slices with: on a server that ignores the generation pins
    (fake-gcs-server), compensating size changes would go unnoticed, so such objects are read directly."""
    data = _write(rfs, any_bucket, [500] * 8)
    infos = [{k: v for k, v in i.items() if k != "crc32c"}
             for i in rfs.find(f"{any_bucket}/d", detail=True).values()]
    a, b = sorted(data)[2], sorted(data)[5]
    other.pipe({a: b"A" * 600, b: b"B" * 400})
    _assert_listed_read(rfs.cat_objects(infos, on_error="return"), data, [a, b])

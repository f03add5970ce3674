"""Part caps (XML multipart: 10,000 parts; compose: compose_max_components) never fail a write up to 5 TiB,
and parts never outgrow the write_memory budget: the growth schedule, checked mathematically, and real
writes against lowered caps and budgets."""
from __future__ import annotations

import pytest

from fluxfs.gcs.checksums import crc32c, crc_to_b64
from fluxfs.gcs.limits import LEGACY_MAX_COMPONENTS as MAX_COMPONENTS
from fluxfs.gcs.limits import MAX_OBJECT_SIZE, XML_MAX_PARTS, XML_MIN_PART_SIZE
from fluxfs.options import DEFAULT_COMPOSE_MAX_COMPONENTS, DEFAULT_WRITE_MEMORY
from fluxfs.writes import settings
from fluxfs.writes.compose import ComposeUploader
from fluxfs.writes.schedule import capacity, fixed_part_size, growth, part_size, reach
from fluxfs.writes.xml import XmlUploader
from tests.conftest import make_fs

from .util import KiB, MiB, payload, temp_leftovers, write_in_pieces

GiB = 1024 * MiB
CASES = [(8 * MiB, XML_MAX_PARTS), (XML_MIN_PART_SIZE, XML_MAX_PARTS), (8 * MiB, MAX_COMPONENTS),
         (XML_MIN_PART_SIZE, MAX_COMPONENTS), (256 * KiB, MAX_COMPONENTS), (1, XML_MAX_PARTS), (1, MAX_COMPONENTS),
         (7 * GiB, MAX_COMPONENTS), (8 * MiB, DEFAULT_COMPOSE_MAX_COMPONENTS),
         (256 * KiB, DEFAULT_COMPOSE_MAX_COMPONENTS)]
PEAK = DEFAULT_WRITE_MEMORY // 2  # the largest part the default budget allows


@pytest.mark.parametrize("start, cap", CASES)
def test_schedule_holds_5_tib_within_the_cap(start, cap):
    sizes = [part_size(n, start, cap) for n in range(1, cap + 1)]
    assert sum(sizes) == capacity(start, cap, *growth(start, cap)) >= MAX_OBJECT_SIZE
    assert min(sizes) == sizes[0] == start  # never below the configured (and so the strategy's minimum) size
    assert sizes == sorted(sizes)            # parts only grow
    assert all(s % start == 0 for s in sizes)  # multiples of start: a 256 KiB multiple stays one
    # The memory bound (write_concurrency x the peak part) is within 2x of the least possible: equal parts.
    assert sizes[-1] <= max(start, 2 * -(-MAX_OBJECT_SIZE // cap))
    # One doubling fewer could not hold 5 TiB: the peak is the least a doubling schedule allows.
    step, k = growth(start, cap)
    if k:
        assert capacity(start, cap, 1, k - 1) < MAX_OBJECT_SIZE


@pytest.mark.parametrize("start, cap", [(8 * MiB, XML_MAX_PARTS), (XML_MIN_PART_SIZE, XML_MAX_PARTS),
                                        (8 * MiB, DEFAULT_COMPOSE_MAX_COMPONENTS),
                                        (KiB, DEFAULT_COMPOSE_MAX_COMPONENTS)])
def test_default_budget_reaches_5_tib_in_every_mode(start, cap):
    """With the default write_memory no part exceeds half of it, and XML and compose still hold 5 TiB."""
    sizes = [part_size(n, start, cap, MAX_OBJECT_SIZE, PEAK) for n in range(1, cap + 1)]
    assert max(sizes) <= PEAK and sum(sizes) >= MAX_OBJECT_SIZE == reach(start, cap, MAX_OBJECT_SIZE, PEAK)


def test_a_budget_caps_parts_and_says_how_far_it_reaches():
    """A budget too small for 5 TiB: parts stop at its half and `reach` is what they hold."""
    sizes = [part_size(n, 8 * MiB, MAX_COMPONENTS, MAX_OBJECT_SIZE, PEAK) for n in range(1, MAX_COMPONENTS + 1)]
    assert max(sizes) == PEAK and sum(sizes) == reach(8 * MiB, MAX_COMPONENTS, MAX_OBJECT_SIZE, PEAK) < MAX_OBJECT_SIZE
    assert reach(8 * MiB, MAX_COMPONENTS, MAX_OBJECT_SIZE, 4 * MiB) == 8 * MiB * MAX_COMPONENTS  # start above it


def test_schedule_numbers():
    """The numbers fluxfs/writes/schedule.py documents."""
    assert growth(8 * MiB, XML_MAX_PARTS) == (812, 7) and part_size(XML_MAX_PARTS, 8 * MiB, XML_MAX_PARTS) == GiB
    assert growth(5 * MiB, XML_MAX_PARTS) == (300, 7) and part_size(XML_MAX_PARTS, 5 * MiB, XML_MAX_PARTS) == 640 * MiB
    assert growth(8 * MiB, MAX_COMPONENTS) == (42, 10)
    assert part_size(MAX_COMPONENTS, 8 * MiB, MAX_COMPONENTS) == 8 * GiB
    big = DEFAULT_COMPOSE_MAX_COMPONENTS
    assert growth(8 * MiB, big, MAX_OBJECT_SIZE, PEAK) == (3048, 5) and part_size(big, 8 * MiB, big) == 256 * MiB
    assert growth(8 * MiB, XML_MAX_PARTS, MAX_OBJECT_SIZE, PEAK) == (812, 7)  # the budget changes nothing here
    # The old schedule (doubling every 2,000 parts, 5 times) held only ~310 GB from 5 MiB parts.
    assert sum(5 * MiB << min(n // 2000, 5) for n in range(XML_MAX_PARTS)) < MAX_OBJECT_SIZE / 16


def test_fixed_part_size_fits_the_cap():
    for size in (0, 1, 8 * MiB, 10 * GiB, MAX_OBJECT_SIZE):
        for cap in (MAX_COMPONENTS, XML_MAX_PARTS):
            part = fixed_part_size(size, 8 * MiB, cap)
            assert part >= 8 * MiB and -(-size // part) <= cap
    assert fixed_part_size(MAX_OBJECT_SIZE, 8 * MiB, MAX_COMPONENTS) == 5 * GiB


def test_unreachable_schedule_is_refused():
    with pytest.raises(ValueError, match="cannot hold"):
        growth(1, 4, MAX_OBJECT_SIZE)


PART = 256 * KiB
CAP = 16
LIMIT = 40 * PART  # the "5 TiB" of these tests: 40 parts' worth at the starting size


@pytest.fixture(params=["compose", "xml"])
def capped(request, flux_server, monkeypatch):
    """A filesystem whose strategy caps writes at 16 parts of a 10 MiB object, on a server enforcing it."""
    mode = request.param
    cls = ComposeUploader if mode == "compose" else XmlUploader
    monkeypatch.setattr(cls, "max_object_size", LIMIT)
    if mode == "xml":
        monkeypatch.setattr(cls, "max_parts", CAP)
        monkeypatch.setattr(settings, "XML_MIN_PART_SIZE", PART)
        flux_server.configure(max_parts=CAP, min_part_size=0)
    else:
        flux_server.configure(max_components=CAP)
    return make_fs(flux_server, multipart=mode, part_size=PART, write_concurrency=4, compose_max_components=CAP), mode


def _check(flux_server, fs, bucket, path, data, info):
    assert info["crc32c"] == crc_to_b64(crc32c(data)) == fs.info(path)["crc32c"]
    assert fs.cat_file(path) == data
    assert temp_leftovers(flux_server, bucket) == [] and flux_server.multipart_uploads(bucket) == []


def test_handle_grows_parts_under_a_lowered_cap(capped, flux_server, bucket):
    fs, mode = capped
    data = payload(LIMIT, seed=40)
    path = f"{bucket}/big-{mode}.bin"
    with fs.open(path, "wb") as f:
        write_in_pieces(f, data, piece=77_777)
    assert f._writer.parts <= CAP  # 40 parts' worth in at most 16 growing parts
    _check(flux_server, fs, bucket, path, data, f.object_info)
    if mode == "compose":
        assert fs.info(path)["componentCount"] == f._writer.parts


def test_pipe_file_uses_parts_that_fit_a_lowered_cap(capped, flux_server, bucket):
    fs, mode = capped
    data = payload(LIMIT, seed=41)
    path = f"{bucket}/piped-{mode}.bin"
    fs.pipe_file(path, data)
    _check(flux_server, fs, bucket, path, data, fs.info(path))


def test_put_file_uses_parts_that_fit_a_lowered_cap(capped, flux_server, bucket, tmp_path):
    fs, mode = capped
    data = payload(LIMIT - 3, seed=43)
    local = tmp_path / "big.bin"
    local.write_bytes(data)
    path = f"{bucket}/put-{mode}.bin"
    fs.put_file(str(local), path)
    _check(flux_server, fs, bucket, path, data, fs.info(path))


def test_write_past_the_object_limit_fails_clearly_and_leaves_nothing(capped, flux_server, bucket):
    fs, mode = capped
    too_big = capacity(PART, CAP, *growth(PART, CAP, LIMIT)) + 1
    path = f"{bucket}/too-big-{mode}.bin"
    with pytest.raises(ValueError, match=f"more than {CAP} parts.*larger than GCS's {LIMIT}-byte limit"):
        # Only GCS's object limit stops it: write_memory (2 GiB) is no part of the message.
        with fs.open(path, "wb") as f:
            write_in_pieces(f, payload(too_big, seed=42), piece=1 << 20)
    assert not fs.exists(path)
    assert temp_leftovers(flux_server, bucket) == [] and flux_server.multipart_uploads(bucket) == []


def test_grown_parts_wait_for_room_so_memory_stays_bounded(flux_server, bucket):
    """Parts in flight hold at most concurrency x the first part: a part 4x as large goes alone."""
    from fluxfs.gcs import bridge
    from fluxfs.writes.fields import ObjectFields
    from fluxfs.writes.parts import PartWriter

    fs = make_fs(flux_server, multipart="compose")
    flux_server.configure(latency_ms=300)   # parts stay in flight while we look
    pw = PartWriter(fs.client, bucket, "grown", ComposeUploader, concurrency=4, create_only=False,
                    fields=ObjectFields())
    try:
        bridge.run(fs, pw.add_part, payload(256 * KiB))
        assert pw.in_flight_limit == MiB and pw.in_flight == 256 * KiB
        bridge.run(fs, pw.add_part, payload(MiB, seed=1))
        assert pw.in_flight == MiB            # waited for the first to finish: 1.25 MiB would not fit
        bridge.run(fs, pw.add_part, payload(8 * MiB, seed=2))   # larger than the room: alone
        assert pw.in_flight == 8 * MiB and pw.peak_in_flight == 8 * MiB
    finally:
        flux_server.configure(latency_ms=0)
        bridge.run(fs, pw.abort)
    assert temp_leftovers(flux_server, bucket) == []

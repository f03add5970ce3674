"""The write_memory budget and the compose component cap: parts grow only up to half the budget, parts in
flight and the part being filled never hold more than it, a budget too small for the write fails it
clearly at the first part past what it can hold, and a server with a component limit is found out
before a write goes past it."""
from __future__ import annotations

import pytest

from fluxfs.gcs.checksums import crc32c, crc_to_b64
from fluxfs.writes import compose_limit
from fluxfs.writes import settings
from fluxfs.writes.compose import ComposeUploader
from fluxfs.writes.schedule import reach
from fluxfs.writes.xml import XmlUploader
from tests.conftest import make_fs

from .util import KiB, MiB, payload, temp_leftovers, write_in_pieces

PART = 256 * KiB
CAP = 16
LIMIT = 40 * PART  # the "5 TiB" of these tests


def _fs(flux_server, monkeypatch, mode, **options):
    """A filesystem capping writes at CAP parts of a LIMIT-byte object, on a server enforcing the cap."""
    cls = ComposeUploader if mode == "compose" else XmlUploader
    monkeypatch.setattr(cls, "max_object_size", LIMIT)
    if mode == "xml":
        monkeypatch.setattr(cls, "max_parts", CAP)
        monkeypatch.setattr(settings, "XML_MIN_PART_SIZE", PART)
        flux_server.configure(max_parts=CAP, min_part_size=0)
    else:
        flux_server.configure(max_components=CAP)
    options = {"write_concurrency": 4, **options}
    return make_fs(flux_server, multipart=mode, part_size=PART, compose_max_components=CAP, **options)


def _nothing_left(flux_server, fs, bucket, path):
    assert not fs.exists(path)
    assert temp_leftovers(flux_server, bucket) == [] and flux_server.multipart_uploads(bucket) == []


@pytest.mark.parametrize("mode", ["compose", "xml"])
def test_parts_and_parts_in_flight_stay_within_the_budget(flux_server, bucket, monkeypatch, mode):
    budget = 8 * PART   # parts up to 4 x PART; 2 MiB in all, where 8 parts in flight alone would take 2 MiB
    fs = _fs(flux_server, monkeypatch, mode, write_memory=budget, write_concurrency=8)
    assert reach(PART, CAP, LIMIT, budget // 2) == LIMIT  # the budget still holds the whole "5 TiB"
    data = payload(LIMIT, seed=50)
    path = f"{bucket}/budget-{mode}.bin"
    flux_server.configure(latency_ms=20)  # parts overlap
    try:
        with fs.open(path, "wb") as f:
            write_in_pieces(f, data, piece=77_777)
    finally:
        flux_server.configure(latency_ms=0)
    pw = f._writer
    assert pw.largest_part == budget // 2 and pw.parts <= CAP  # parts grew to the budget's half, no further
    assert pw.peak_in_flight + pw.largest_part <= budget      # in flight + the part being filled
    assert pw.peak_in_flight == budget // 2                    # the budget, not concurrency, was the bound
    assert f.object_info["crc32c"] == crc_to_b64(crc32c(data)) and fs.cat_file(path) == data
    assert temp_leftovers(flux_server, bucket) == [] and flux_server.multipart_uploads(bucket) == []


@pytest.mark.parametrize("mode", ["compose", "xml"])
def test_a_budget_too_small_for_the_write_fails_clearly_and_leaves_nothing(flux_server, bucket, monkeypatch, mode):
    budget = 4 * PART   # parts up to 2 x PART: 16 parts hold 31 x PART, less than the write
    fs = _fs(flux_server, monkeypatch, mode, write_memory=budget)
    held = reach(PART, CAP, LIMIT, budget // 2)
    assert held == 31 * PART
    path = f"{bucket}/small-budget-{mode}.bin"
    option = " or compose_max_components" if mode == "compose" else ""
    with pytest.raises(ValueError, match=rf"small-budget-{mode}.bin: \d+ bytes do not fit in {CAP} parts .* of at "
                                         rf"most {2 * PART} bytes \(half of write_memory={budget}\); raise "
                                         rf"write_memory{option} .*write it again"):
        with fs.open(path, "wb") as f:
            write_in_pieces(f, payload(LIMIT, seed=51), piece=1 << 20)
    assert f._writer.size <= held  # failed at the first part past what the budget holds, not at close
    _nothing_left(flux_server, fs, bucket, path)


def test_a_known_size_too_large_for_the_budget_fails_before_uploading(flux_server, bucket, monkeypatch):
    fs = _fs(flux_server, monkeypatch, "compose", write_memory=4 * PART)
    path = f"{bucket}/piped.bin"
    with pytest.raises(ValueError, match=rf"do not fit in {CAP} parts \(compose_max_components\) of at most "
                                         rf"{2 * PART} bytes.*raise write_memory or compose_max_components"):
        fs.pipe_file(path, payload(CAP * 2 * PART + 1, seed=52))
    _nothing_left(flux_server, fs, bucket, path)
    fs.pipe_file(path, data := payload(CAP * 2 * PART, seed=52))  # what the budget holds goes through
    assert fs.cat_file(path) == data


def test_write_memory_is_validated_and_taken_as_text(flux_server):
    with pytest.raises(ValueError, match="write_memory 1048576 must hold two parts of part_size 8388608"):
        make_fs(flux_server, write_memory=MiB)
    with pytest.raises(ValueError, match="compose_max_components must be at least 1"):
        make_fs(flux_server, compose_max_components=0)
    fs = make_fs(flux_server, write_memory="67108864", compose_max_components="2048")  # as from -o / env
    assert fs.options.write_memory == 64 * MiB and fs.options.compose_max_components == 2048
    with pytest.raises(ValueError, match="do not fit write_memory 67108864 twice"):
        fs.open("b/k", "wb", block_size=48 * MiB)


def test_server_component_limit_is_found_before_the_write_passes_it(flux_server, bucket, monkeypatch):
    """A server keeping a component limit (older GCS: 1,024; here 8) fails the first write that needs more at
    the first part past it, naming the limit and the option; the filesystem then stays under it."""
    monkeypatch.setattr(compose_limit, "PROBE_AT", 8)
    flux_server.configure(max_components=8)
    fs = make_fs(flux_server, multipart="compose", part_size=PART, write_concurrency=2)
    data = payload(40 * PART, seed=53)
    path = f"{bucket}/limited.bin"
    with pytest.raises(ValueError, match=r"limited.bin: the server refuses composite objects of more than 8 "
                                         r"components .*compose_max_components=8"):
        with fs.open(path, "wb") as f:
            write_in_pieces(f, data)
    assert f._writer.parts < 16        # stopped soon after part 9, not at close
    _nothing_left(flux_server, fs, bucket, path)
    with fs.open(path, "wb") as f:     # the same write now grows its parts to stay under 8
        write_in_pieces(f, data)
    assert f._writer.parts <= 8 and fs.info(path)["componentCount"] <= 8
    assert f.object_info["crc32c"] == crc_to_b64(crc32c(data)) and fs.cat_file(path) == data
    assert temp_leftovers(flux_server, bucket) == []


def test_a_server_without_component_limit_takes_writes_past_it(flux_server, bucket, monkeypatch):
    """GCS today: the check passes and the write keeps its small parts past the old limit."""
    monkeypatch.setattr(compose_limit, "PROBE_AT", 8)
    fs = make_fs(flux_server, multipart="compose", part_size=PART, write_concurrency=2)
    data = payload(12 * PART, seed=54)
    path = f"{bucket}/unlimited.bin"
    with fs.open(path, "wb") as f:
        write_in_pieces(f, data)
    assert f._writer.parts == 12 and fs.info(path)["componentCount"] == 12
    assert fs.cat_file(path) == data and temp_leftovers(flux_server, bucket) == []

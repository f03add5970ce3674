"""fs.read_ranges: exact bytes of any ranges, coalesced by the one `coalesce` rule, pinned to one generation."""
from __future__ import annotations

import os

import pytest

from fluxfs.errors import ObjectChanged, PreconditionFailed
from fluxfs.reads.ranges import coalesce

DATA = os.urandom(9 * 2**20 + 4321)  # the `stored` object: past one plain GET (8 MiB), large ranges go in parallel


def _groups(ranges, max_gap, max_size=None):
    return [(g.start, g.end, g.members) for g in coalesce(ranges, max_gap, max_size)]


def test_coalesce_joins_close_ranges_and_keeps_far_ones_apart():
    assert _groups([(0, 10), (10, 20)], 0) == [(0, 20, [0, 1])]                      # adjacent
    assert _groups([(0, 10), (5, 8), (7, 30)], 0) == [(0, 30, [0, 1, 2])]            # overlapping, inside
    assert _groups([(0, 10), (15, 20)], 5) == [(0, 20, [0, 1])]                      # gap == max_gap: joined
    assert _groups([(0, 10), (16, 20)], 5) == [(0, 10, [0]), (16, 20, [1])]          # gap > max_gap: apart
    assert _groups([(50, 60), (0, 10), (12, 14)], 2) == [(0, 14, [1, 2]), (50, 60, [0])]   # any order
    assert _groups([(0, 10), (5, 5), (10, 10), (30, 30)], 0) == [(0, 10, [0, 1, 2]), (30, 30, [3])]  # empty
    assert _groups([(0, 10), (10, 20), (20, 30)], 0, max_size=20) == [(0, 20, [0, 1]), (20, 30, [2])]
    assert _groups([], 10) == []
    with pytest.raises(ValueError, match="max_gap must be >= 0 bytes, not -1"):
        coalesce([(0, 1)], -1)


def test_read_ranges_returns_exact_bytes(stored):
    fs, path = stored
    big = (100, 100 + 9 * 2**20)   # one range past 8 MiB: parallel ranged GETs
    ranges = [(0, 10), (10, 30), (20, 40), (5000, 6000), (7, 7), (len(DATA) - 5, len(DATA)),
              (2 * 2**20, 2 * 2**20 + 1), (len(DATA) - 3, len(DATA) + 50), big]
    for max_gap in (0, 2**20, 64 * 2**20):
        got = fs.read_ranges(path, ranges, max_gap=max_gap)
        assert list(got) == [DATA[a:b] for a, b in ranges]
        assert got.size == len(DATA) and got.generation == fs.info(path)["generation"]
    assert list(fs.read_ranges(path, [])) == []


def test_read_ranges_into_buffers(stored):
    fs, path = stored
    ranges = [(0, 10), (10, 30), (5000, 6000), (7000, 7000), (len(DATA) - 5, len(DATA))]
    bufs = [bytearray(b - a) for a, b in ranges]
    result = fs.read_ranges(path, ranges, into=bufs)
    assert [bytes(b) for b in bufs] == [DATA[a:b] for a, b in ranges]
    assert result.size == len(DATA)
    with pytest.raises(ValueError, match=r"/o: the buffer for range \(0, 10\) holds 4 bytes, not 10"):
        fs.read_ranges(path, [(0, 10)], into=[bytearray(4)])
    with pytest.raises(ValueError, match=r"/o: range \(5, 2\) is not 0 <= start <= end"):
        fs.read_ranges(path, [(5, 2)])


@pytest.mark.parametrize("change", ["overwrite", "delete"])
@pytest.mark.parametrize("into", [False, True])
def test_a_changed_object_is_one_error_naming_it(stored, change, into):
    fs, path = stored
    gen = fs.info(path)["generation"]
    if change == "overwrite":
        fs.pipe_file(path, DATA[::-1])
    else:
        fs.rm(path)
    kwargs = {"into": [bytearray(10), bytearray(10)]} if into else {}
    with pytest.raises(ObjectChanged,
                       match=rf"{path}#{gen} changed while being read: generation {gen} no longer exists"):
        fs.read_ranges(path, [(0, 10), (5 * 2**20, 5 * 2**20 + 10)], generation=gen, **kwargs)
    # The types callers caught before still catch it.
    with pytest.raises(FileNotFoundError):
        fs.read_ranges(path, [(0, 10)], generation=gen)
    with pytest.raises(PreconditionFailed):
        fs.read_ranges(path, [(0, 10)], generation=gen)


def test_a_missing_object_is_file_not_found(stored):
    fs, path = stored
    with pytest.raises(FileNotFoundError, match="nothing-here") as caught:
        fs.read_ranges(path + "-nothing-here", [(0, 10)])
    assert not isinstance(caught.value, ObjectChanged)

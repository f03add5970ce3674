"""The parallel lister returns exactly what a plain sequential listing returns, whatever the splits."""
from __future__ import annotations

import threading
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fluxfs.gcs import tempnames
from fluxfs.gcs.tempnames import TEMP_PREFIX
from tests.conftest import make_fs, new_bucket_name, wait_for

from .helpers import listed_names, put_keys, sequential_names

# Characters at the interesting places of the key space: the bottom ('\x01', ' '), '/', '~'
# (top of ASCII), Latin-1, CJK, just below/above the surrogate gap, U+FFFF, the last code point.
CHARS = ["\x01", " ", "!", "/", "0", "9", "a", "b", "z", "~", "é", "中", "\ud7ff", "\ue000", "\uffff",
         "\U0010ffff", "😀"]

short = st.text(alphabet=CHARS, min_size=1, max_size=6)
long_prefix = st.sampled_from(["deep/" * 8, "x" * 60, "data/train/img_", "\U0010ffff" * 5])
keys_strategy = st.lists(
    st.one_of(
        short,
        st.builds(lambda p, s: p + s, long_prefix, short),          # long shared prefixes
        st.builds(lambda p, c: p + c, long_prefix, st.sampled_from(CHARS)),   # differ only in the last char
    ),
    min_size=0, max_size=50,
).map(lambda ks: sorted({k for k in ks if k not in (".", "..")}))

FAST_RETRY = {"initial": 0.001, "maximum": 0.02, "deadline": 60, "max_attempts": 30}
HYPO = settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                       HealthCheck.too_slow])


def _pick_prefix(data, keys):
    choices = ["", "no-such-prefix/"] + [k[: max(1, len(k) // 2)] for k in keys[:5]] + keys[:2]
    return data.draw(st.sampled_from(choices), label="prefix")


def _check(server, fs, keys, prefix, sort=False):
    bucket = new_bucket_name()
    server.create_bucket(bucket)
    put_keys(fs, bucket, keys)
    want = sequential_names(server.url, bucket, prefix)
    got = listed_names(fs, bucket, prefix=prefix, sort=sort)
    assert len(got) == len(want), (len(got), len(want))
    assert set(got) == {f"{bucket}/{k}" for k in want}
    if sort:
        assert got == [f"{bucket}/{k}" for k in want]
    return got


@HYPO
@given(keys=keys_strategy, data=st.data(), page=st.integers(1, 6), conc=st.sampled_from([2, 8, 32]))
def test_matches_sequential_listing(gcs_server, keys, data, page, conc):
    fs = make_fs(gcs_server, list_page_size=page, list_concurrency=conc)
    _check(gcs_server, fs, keys, _pick_prefix(data, keys), sort=data.draw(st.booleans(), label="sort"))


@HYPO
@given(keys=keys_strategy, data=st.data(), page=st.integers(1, 6))
def test_matches_sequential_listing_under_faults(flux_server, keys, data, page):
    fs = make_fs(flux_server, list_page_size=page, list_concurrency=16, retry=FAST_RETRY)
    bucket = new_bucket_name()
    flux_server.create_bucket(bucket)
    put_keys(fs, bucket, keys)
    prefix = _pick_prefix(data, keys)
    want = sequential_names(flux_server.url, bucket, prefix)
    flux_server.configure(fail_rate=0.1, fail_codes=(429, 503), reset_rate=0.05, fail_ops={"list"},
                          seed=data.draw(st.integers(0, 1000), label="seed"))
    try:
        got = listed_names(fs, bucket, prefix=prefix)
    finally:
        flux_server.configure(fail_rate=0.0, reset_rate=0.0)
    assert sorted(got) == [f"{bucket}/{k}" for k in want]


def test_many_objects_many_splits(flux_server, bucket):
    """3,000 numbered objects, pages of 7, 64 workers: hundreds of splits, every object once."""
    flux_server.generate(bucket, 3000, 0, prefix="d/img_")
    fs = make_fs(flux_server, list_page_size=7, list_concurrency=64)
    got = listed_names(fs, bucket)
    assert len(got) == 3000 and len(set(got)) == 3000
    assert sorted(got) == [f"{bucket}/d/img_{i:08d}" for i in range(3000)]
    assert listed_names(fs, bucket, sort=True) == sorted(got)


def test_splits_cost_few_extra_pages(flux_server, bucket):
    """Work stealing (including the fan-out from the unlisted tail) adds partial pages, not a flood of them."""
    flux_server.generate(bucket, 5000, 0, prefix="p/")
    flux_server.configure(latency_ms=20)   # pages overlap, so idle workers do steal
    fs = make_fs(flux_server, list_page_size=100, list_concurrency=64)
    flux_server.reset_stats()
    got = listed_names(fs, bucket)
    assert len(got) == len(set(got)) == 5000
    pages = flux_server.stats()["requests"]["list"]
    assert 50 <= pages <= 100, f"{pages} list pages for 50 pages' worth of objects"


@pytest.mark.parametrize("prefix", ["", "p/", "p/img_"])
def test_a_prefix_fans_out_like_a_bucket(flux_server, bucket, prefix):
    """Listing under a prefix overlaps its pages as listing the whole bucket does.

    The prefix's range once ended at ``prefix_end(prefix)``, which reads as the empty suffix
    when estimating work, so the one span looked empty and a prefix was listed page by page.
    """
    flux_server.generate(bucket, 4000, 0, prefix="p/img_")
    flux_server.configure(latency_ms=20)   # pages overlap, so idle workers do steal
    fs = make_fs(flux_server, list_page_size=100, list_concurrency=16)
    flux_server.reset_stats()
    got = listed_names(fs, bucket, prefix=prefix)
    assert sorted(got) == [f"{bucket}/p/img_{i:08d}" for i in range(4000)]
    peak = flux_server.stats()["peak_in_flight"]["list"]
    assert peak >= 8, f"at most {peak} list pages in flight for prefix {prefix!r} with 16 workers"


def test_many_objects_under_faults(flux_server, bucket):
    flux_server.generate(bucket, 2000, 0, prefix="f/")
    fs = make_fs(flux_server, list_page_size=10, list_concurrency=32, retry=FAST_RETRY)
    flux_server.configure(fail_rate=0.1, fail_codes=(429, 503), reset_rate=0.05, fail_ops={"list"})
    got = listed_names(fs, bucket, prefix="f/")
    assert sorted(got) == [f"{bucket}/f/{i:08d}" for i in range(2000)]


def test_info_dicts_have_gcsfs_shape(gcs_server, any_bucket):
    fs = make_fs(gcs_server)
    fs.pipe({f"{any_bucket}/a/x.bin": b"12345", f"{any_bucket}/b": b""})
    infos = {o["name"]: o for batch in fs.iter_objects(any_bucket) for o in batch}
    assert set(infos) == {f"{any_bucket}/a/x.bin", f"{any_bucket}/b"}
    x = infos[f"{any_bucket}/a/x.bin"]
    ref = fs.info(f"{any_bucket}/a/x.bin")
    assert x["size"] == 5 and isinstance(x["size"], int) and x["type"] == "file"
    assert x["generation"] == ref["generation"] and x["crc32c"] == ref["crc32c"]
    assert x["updated"] == ref["updated"]


def test_path_is_a_directory_and_prefix_is_raw(flux_server, bucket, fs):
    put_keys(fs, bucket, ["dir/img_1", "dir/img_2", "dir/other", "dirt/x", "top"])
    assert sorted(listed_names(fs, f"{bucket}/dir")) == [f"{bucket}/dir/img_1", f"{bucket}/dir/img_2",
                                                         f"{bucket}/dir/other"]
    assert sorted(listed_names(fs, f"flux://{bucket}/dir/", prefix="img_")) == [f"{bucket}/dir/img_1",
                                                                               f"{bucket}/dir/img_2"]
    assert sorted(listed_names(fs, bucket, prefix="dir")) == [f"{bucket}/dir/img_1", f"{bucket}/dir/img_2",
                                                             f"{bucket}/dir/other", f"{bucket}/dirt/x"]


def test_empty_prefix_and_empty_bucket_yield_nothing(flux_server, bucket, fs):
    assert listed_names(fs, bucket) == []
    put_keys(fs, bucket, ["a/1"])
    assert listed_names(fs, bucket, prefix="zzz") == []
    assert listed_names(fs, f"{bucket}/nothing/here") == []


def test_single_object(gcs_server, any_bucket):
    fs = make_fs(gcs_server, list_concurrency=8)
    put_keys(fs, any_bucket, ["only"])
    assert listed_names(fs, any_bucket) == [f"{any_bucket}/only"]


def test_batch_size_regroups(flux_server, bucket):
    flux_server.generate(bucket, 95, 0)
    fs = make_fs(flux_server, list_page_size=7, list_concurrency=4)
    sizes = [len(b) for b in fs.iter_objects(bucket, batch_size=20)]
    assert sum(sizes) == 95 and all(s == 20 for s in sizes[:-1]) and 0 < sizes[-1] <= 20


def test_temporary_objects_are_excluded(flux_server, bucket, fs):
    """Only fluxfs's temporaries (named *and* marked as one) are hidden; anything else under the prefix,
    even an object merely named like a temporary, is listed."""
    temp = tempnames.temp_key("1-host-1-dead", "compose")
    forged = tempnames.temp_key("1-host-1-dead", "compose")
    fs.pipe_file(f"{bucket}/{temp}", b"t", metadata=tempnames.marker("1-host-1-dead"))
    put_keys(fs, bucket, ["_a", "_fluxfs-tmp", forged, f"{TEMP_PREFIX}compose/job/1", f"{TEMP_PREFIX}x",
                          "_fluxfs-tmp0", "z"])
    shown = ["_a", "_fluxfs-tmp", forged, f"{TEMP_PREFIX}compose/job/1", f"{TEMP_PREFIX}x", "_fluxfs-tmp0", "z"]
    assert sorted(listed_names(fs, bucket)) == sorted(f"{bucket}/{k}" for k in shown)
    assert sorted(listed_names(fs, bucket, prefix=TEMP_PREFIX)) == sorted(
        [f"{bucket}/{TEMP_PREFIX}compose/job/1", f"{bucket}/{TEMP_PREFIX}x", f"{bucket}/{forged}"])
    assert len(listed_names(fs, bucket, include_temp=True)) == 8


def test_missing_bucket_raises_file_not_found_naming_it(gcs_server):
    fs = make_fs(gcs_server)
    with pytest.raises(FileNotFoundError, match="no-such-bucket-xyz"):
        listed_names(fs, "no-such-bucket-xyz")


def test_permission_denied_names_the_bucket(flux_server, bucket, fs):
    put_keys(fs, bucket, ["a"])
    flux_server.configure(deny_ops={"list"})
    with pytest.raises(PermissionError, match=bucket):
        listed_names(fs, bucket)


def test_objects_added_and_deleted_during_listing(flux_server, bucket):
    """Concurrent writers and deleters: no crash, no duplicates, every untouched object listed."""
    flux_server.generate(bucket, 1500, 0, prefix="keep/")
    writer_fs = make_fs(flux_server)
    put_keys(writer_fs, bucket, [f"keep/{i:08d}x" for i in range(0, 1500, 3)])   # the ones we delete
    stop = threading.Event()

    def churn():
        i = 0
        while not stop.is_set():
            writer_fs.pipe_file(f"{bucket}/keep/{i * 3:08d}y", b"new")
            writer_fs.rm_file(f"{bucket}/keep/{i * 3:08d}x")
            i = (i + 1) % 500

    t = threading.Thread(target=churn, daemon=True)
    t.start()
    try:
        time.sleep(0.05)
        fs = make_fs(flux_server, list_page_size=5, list_concurrency=32)
        got = listed_names(fs, bucket)
    finally:
        stop.set()
        t.join(30)
    assert len(got) == len(set(got))
    assert {f"{bucket}/keep/{i:08d}" for i in range(1500)} <= set(got)


def test_closing_early_cancels_the_listing(flux_server, bucket):
    """The whole listing would take ~6 s (500 pages of 50 ms over 4 workers); closing stops it at once."""
    flux_server.generate(bucket, 5000, 0)
    flux_server.configure(latency_ms=50)
    fs = make_fs(flux_server, list_page_size=10, list_concurrency=4)
    it = fs.iter_objects(bucket)
    assert next(it)
    it.close()
    # Requests already on the wire when we closed still finish on the server: wait until none is served
    # (bounded well below the ~6 s the listing would need), then check that no new one starts.
    wait_for(lambda: not flux_server.stats()["in_flight"], "list requests to stop after the iterator was closed",
             timeout=2.0)
    cur = flux_server.stats()["requests"]
    time.sleep(0.3)
    assert flux_server.stats()["requests"] == cur


@pytest.mark.parametrize("conc", [1, 3])
def test_low_concurrency_and_progress(flux_server, bucket, conc):
    flux_server.generate(bucket, 250, 0)
    fs = make_fs(flux_server, list_page_size=9, list_concurrency=conc)

    class Counter:
        n = 0

        def update(self, k):
            self.n += k

    bar = Counter()
    assert len(listed_names(fs, bucket, progress=bar)) == 250
    assert bar.n == 250


def test_sorted_output_with_a_slow_consumer(flux_server, bucket):
    """A consumer slower than the lister keeps the batch queue full: sorted output stays complete and ordered."""
    flux_server.generate(bucket, 1200, 0, prefix="s/")
    fs = make_fs(flux_server, list_page_size=5, list_concurrency=8)
    got = []
    for batch in fs.iter_objects(bucket, sort=True):
        got += [o["name"] for o in batch]
        time.sleep(0.002)
    assert got == [f"{bucket}/s/{i:08d}" for i in range(1200)]


@HYPO
@given(keys=keys_strategy, data=st.data(), page=st.integers(1, 6))
def test_start_and_end_offsets_keep_the_listing_to_a_key_range(gcs_server, keys, data, page):
    """`start_offset`/`end_offset`: exactly the prefix's keys in [start, end), as GCS's own parameters select."""
    fs = make_fs(gcs_server, list_page_size=page, list_concurrency=8)
    bucket = new_bucket_name()
    gcs_server.create_bucket(bucket)
    put_keys(fs, bucket, keys)
    prefix = _pick_prefix(data, keys)
    bounds = [None, "", "0", "a", "~"] + keys[:4] + [k + "\x01" for k in keys[:2]]
    start = data.draw(st.sampled_from(bounds), label="start")
    end = data.draw(st.sampled_from(bounds), label="end")
    want = [k for k in sequential_names(gcs_server.url, bucket, prefix)
            if (start is None or k >= start) and (end is None or k < end)]
    got = listed_names(fs, bucket, prefix=prefix, start_offset=start, end_offset=end,
                       sort=data.draw(st.booleans(), label="sort"))
    assert sorted(got) == [f"{bucket}/{k}" for k in want]
    assert len(got) == len(want)


def test_offsets_with_many_splits(flux_server, bucket):
    """A range of 3,000 numbered objects listed by 64 workers in pages of 7: the range's objects, once."""
    flux_server.generate(bucket, 3000, 0, prefix="d/img_")
    fs = make_fs(flux_server, list_page_size=7, list_concurrency=64)
    got = listed_names(fs, bucket, prefix="d/", start_offset="d/img_00000500", end_offset="d/img_00002500")
    assert sorted(got) == [f"{bucket}/d/img_{i:08d}" for i in range(500, 2500)] and len(got) == 2000

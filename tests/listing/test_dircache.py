"""`fill_dircache` (find's fast dircache filling) gives exactly what gcsfs's `_get_dirs_and_update_cache` gives.

Pure bookkeeping over info dicts, so compared directly on generated name sets (the HTTP side
of `find` is compared with gcsfs on a live server in test_find_du.py).
"""
from __future__ import annotations

import gcsfs.core
from hypothesis import given, settings
from hypothesis import strategies as st

from fluxfs.listing.dircache import _parent_runs, fill_dircache

# Few characters, '/' among them, so names nest, repeat parents, and collide as file and directory.
segments = st.text(alphabet=["a", "b", "/", "!", "0"], min_size=1, max_size=6)


def _fs():
    return gcsfs.core.GCSFileSystem(token="anon", skip_instance_cache=True)


def _infos(keys):
    return [{"name": f"bkt/{k}", "size": len(k), "type": "file"} for k in sorted(set(keys))]


@settings(max_examples=300, deadline=None)
@given(keys=st.lists(segments, max_size=40), root=st.sampled_from(["bkt", "bkt/", "bkt/a", "bkt/a/b"]),
       prefix=st.sampled_from(["", "a", "b/"]), update=st.booleans(), run_min=st.sampled_from([1, 2, 64]))
def test_same_dirs_and_dircache_as_gcsfs(keys, root, prefix, update, run_min):
    objects = _infos(keys)
    ours, ref = _fs(), _fs()
    got = fill_dircache(ours, root, list(objects), prefix=prefix, update_cache=update, run_min=run_min)
    want = ref._get_dirs_and_update_cache(root, list(objects), prefix=prefix, update_cache=update)
    assert got == want
    assert list(ours.dircache) == list(ref.dircache)
    for d, entries in ref.dircache.items():
        assert ours.dircache[d] == entries, d


def test_large_flat_directory_keeps_order_and_entries():
    objects = _infos([f"train/img_{i:06d}" for i in range(5000)] + ["train/sub/x", "top"])
    ours, ref = _fs(), _fs()
    assert fill_dircache(ours, "bkt", objects) == ref._get_dirs_and_update_cache("bkt", objects)
    assert dict(ours.dircache) == dict(ref.dircache)
    assert len(ours.dircache["bkt/train"]) == 5001   # 5000 files and the "sub" directory


@settings(max_examples=300, deadline=None)
@given(keys=st.lists(segments, max_size=40), chunk=st.integers(1, 6))
def test_parent_runs_split_where_the_parent_changes(keys, chunk):
    names = [f"bkt/{k}" for k in sorted(set(keys))]
    runs = _parent_runs(names, chunk=chunk)
    assert [i for start, stop, _ in runs for i in range(start, stop)] == list(range(len(names)))
    for n, (start, stop, parent) in enumerate(runs):
        assert all(names[i].rpartition("/")[0] == parent for i in range(start, stop))
        if n:
            assert runs[n - 1][2] != parent   # maximal: neighbours differ

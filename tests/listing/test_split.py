"""Split keys: always strictly inside the range, found whenever the range has room, never a surrogate."""
from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from fluxfs.listing.keyspace import Alphabets, choose_split, prefix_end

CHARS = ["\x00", "\x01", " ", "/", "0", "1", "9", "a", "b", "~", "\x7f", "é", "\ud7ff", "\ue000", "\uffff",
         "\U0010fffe", "\U0010ffff"]
keys = st.text(alphabet=CHARS, max_size=8)


def _valid(m: str) -> bool:
    return not any(0xD800 <= ord(c) <= 0xDFFF for c in m) and len(m.encode("utf-8")) <= 1024


@settings(max_examples=300, deadline=None)
@given(a=keys, b=st.one_of(st.none(), keys), sample=st.lists(keys, max_size=10), items=st.integers(1, 5000))
def test_split_is_strictly_inside(a, b, sample, items):
    if b is not None and a >= b:
        a, b = b, a
    if b is not None and a == b:
        return
    alph = Alphabets()
    alph.learn(sample)
    srt = sorted(sample)
    keep = (srt[0], srt[-1], max(1, len(srt) - 1), items) if srt else None
    for kwargs in (dict(), dict(alphabets=alph), dict(alphabets=alph, keep=keep)):
        m = choose_split(a, b, **kwargs)
        if m is not None:
            assert a < m and (b is None or m < b) and _valid(m), (a, b, m)


@settings(max_examples=200, deadline=None)
@given(a=keys, tail=st.text(alphabet=CHARS, min_size=1, max_size=4))
def test_split_found_when_room(a, tail):
    """Between a and a+tail+'x' lies at least a+tail: a split must be found (not just None)."""
    b = a + tail + "x"
    m = choose_split(a, b)
    assert m is not None and a < m < b


def test_unsplittable_ranges():
    assert choose_split("a", "a\x00") is None          # nothing lies between a key and key+'\x00'
    assert choose_split("", "\x00") is None
    assert choose_split("\U0010ffff", None) is not None  # unbounded above: always room
    assert choose_split("a", "a\x00\x00") == "a\x00"


def test_single_character_ranges():
    assert choose_split("a", "b") is not None and "a" < choose_split("a", "b") < "b"
    assert "~" < choose_split("~", "\x7f") < "\x7f"
    m = choose_split("\ud7ff", "\ue000")   # only surrogates between: must look deeper
    assert m is not None and _valid(m) and "\ud7ff" < m < "\ue000"


def test_extrapolation_lands_near_the_intended_count():
    """From one page of numbered names, keeping 2,000 names lands within 2x of 2,000."""
    alph = Alphabets()
    page = [f"img_{i:08d}.jpg" for i in range(1000)]
    alph.learn(page[::31] + [page[-1]])
    m = choose_split(page[-1], None, alphabets=alph, keep=(page[0], page[-1], 999, 2000))
    kept = sum(1 for i in range(1000, 100_000) if f"img_{i:08d}.jpg" < m)
    assert 1000 <= kept <= 4000, (m, kept)


def test_prefix_end():
    assert prefix_end("") is None
    assert prefix_end("ab") == "ac"
    assert prefix_end("a\U0010ffff") == "b"
    assert prefix_end("\ud7ff"[:0] + "a\ud7ff") == "a\ue000"
    assert prefix_end("\U0010ffff") is None

"""Slicing a composite's body, received as chunks of any size, back into its objects' bytes."""
from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from fluxfs.reads.batched import _pieces


@settings(max_examples=300, deadline=None)
@given(sizes=st.lists(st.integers(0, 300), max_size=40), cuts=st.lists(st.integers(1, 500), max_size=60))
def test_pieces_match_slices_of_the_whole_body(sizes, cuts):
    body = bytes(i % 251 for i in range(sum(sizes)))
    chunks, off = [], 0
    for c in cuts:  # aiohttp hands the body over in chunks of whatever size arrived
        if off >= len(body):
            break
        chunks.append(body[off:off + c])
        off += c
    if off < len(body):
        chunks.append(body[off:])
    got = list(_pieces(chunks, sizes))
    want, off = [], 0
    for n in sizes:
        want.append(body[off:off + n])
        off += n
    assert got == want
    assert all(type(p) is bytes for p in got)

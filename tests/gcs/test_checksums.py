"""The one crc helper: its running crc (`extend`, the faster `crc32c` package when installed, else google-crc32c)
gives google-crc32c's value of the joined bytes, whatever the pieces."""
from __future__ import annotations

import os

import google_crc32c
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fluxfs.gcs import checksums


@settings(max_examples=200, deadline=None)
@given(st.lists(st.binary(max_size=3000), max_size=8))
def test_running_crc_over_pieces_is_the_crc_of_the_whole(pieces):
    crc = 0
    for p in pieces:
        crc = checksums.extend(crc, p)
    assert crc == google_crc32c.value(b"".join(pieces)) == checksums.crc32c(b"".join(pieces))


def test_large_bodies_and_the_empty_one():
    body = os.urandom(3 * 2**20 + 5)
    assert checksums.crc32c(body) == google_crc32c.value(body)
    assert checksums.extend(checksums.crc32c(body[:12345]), body[12345:]) == google_crc32c.value(body)
    assert checksums.crc32c(b"") == 0


def test_the_fast_implementation_is_used_when_installed():
    pytest.importorskip("crc32c")
    assert checksums.IMPLEMENTATION == "crc32c"
    view = memoryview(os.urandom(2**20))[7:]
    assert checksums.extend(0, view) == google_crc32c.value(bytes(view))

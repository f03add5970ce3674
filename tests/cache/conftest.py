"""Fixtures of the node-local cache's tests."""
from __future__ import annotations

import pytest

from tests.conftest import mounted_tmpfs

PART = 32 * 1024  # the range fills' part size under `part_size`: small objects span several parts


def write_pack(cache, items: list) -> None:
    """Write (entry, bytes) pairs to the cache now as one closed pack of their own, as the filler thread writes a
    call's claims: how a test plants a pack nobody holds open, or one whose bytes are another object's (which
    `fs.cat_objects` never writes)."""
    from fluxfs.cache import claims, objects

    got = dict(items)
    made, _ = claims.claim(cache, list(got), sum(e[4] for e in got), objects.PACK_MAX, share=False)
    for c in made:
        claims.write(cache, [c], got)


@pytest.fixture
def part_size(monkeypatch):
    """Range fills cut objects into parts of `PART` bytes."""
    from fluxfs.cache import ranges
    monkeypatch.setattr(ranges, "PART", PART)


@pytest.fixture
def small_disk(tmp_path):
    """A 1 MiB tmpfs (needs root, as in CI's container) to fill; skipped where mount is not allowed."""
    d = tmp_path / "disk"
    d.mkdir()
    with mounted_tmpfs(d, "1m"):
        yield d

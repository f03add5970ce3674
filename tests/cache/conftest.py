"""Fixtures of the node-local cache's tests."""
from __future__ import annotations

import pytest

from tests.conftest import mounted_tmpfs

PART = 32 * 1024  # the range fills' part size under `part_size`: small objects span several parts


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

"""Fixtures for the server's own tests: one in-process server per module, fresh buckets per test."""
from __future__ import annotations

import uuid

import pytest

from fluxfs.server import run


@pytest.fixture(scope="module")
def srv():
    with run() as handle:
        yield handle


@pytest.fixture(autouse=True)
def _clean_profile(request):
    yield
    if "srv" in request.fixturenames:
        request.getfixturevalue("srv").configure(profile="local")


@pytest.fixture
def bkt(srv) -> str:
    name = f"s{uuid.uuid4().hex[:12]}"
    srv.create_bucket(name)
    return name

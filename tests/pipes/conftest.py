"""Fixtures for the pipes tests: one session bucket of small synthetic objects on the fluxfs server."""
from __future__ import annotations

import pytest

from fluxfs.server.synthetic import synthetic_bytes, synthetic_size
from tests.conftest import new_bucket_name

SIZES = (64, 512)  # small objects: the tests are about coverage and bytes, not volume
N_DATA = 2000
N_SMALL = 200


def expected_bytes(key: str) -> bytes:
    """What the server generated for `key` (prefix included), at the size it drew."""
    return synthetic_bytes(key, synthetic_size(key, SIZES, 0), 0)


@pytest.fixture(scope="session")
def data_bucket(flux_server) -> str:
    """A bucket with N_DATA objects under "data/" and N_SMALL under "small/"."""
    name = new_bucket_name()
    flux_server.create_bucket(name)
    flux_server.generate(name, N_DATA, size=SIZES, prefix="data/", seed=0)
    flux_server.generate(name, N_SMALL, size=SIZES, prefix="small/", seed=0)
    return name


@pytest.fixture(scope="session")
def storage_options(flux_server) -> dict:
    return {"endpoint_url": flux_server.url, "token": "anon"}

"""Chaos fixtures: 10% injected faults (429/503, connection resets, slow answers) and the leftover checks.

Every chaos test ends with `assert_clean`: no object under the reserved temporary prefix and no
multipart upload still open, whatever the faults did to the requests in between.
"""
from __future__ import annotations

import pytest

from fluxfs.gcs.tempnames import TEMP_PREFIX
from tests.conftest import make_fs, server_options

# Fast backoff so a faulty run stays short, but enough attempts that 10% faults never exhaust them
# (0.15 ** 12 is about 1e-10 per request).
FAST_RETRY = {"initial": 0.005, "maximum": 0.1, "max_attempts": 12, "deadline": 60.0}

# "10% faults": one request in ten answered 429 or 503, a further 5% reset mid-answer,
# and every answer delayed a little (slow responses).
TEN_PERCENT = {"fail_rate": 0.10, "fail_codes": (429, 503), "reset_rate": 0.05, "latency_ms": 2}


def faults(server, ops, seed: int = 1, **overrides) -> dict:
    """Switch on 10% faults for the given operation kinds; returns the settings in force."""
    return server.configure(**{**TEN_PERCENT, "fail_ops": set(ops), "seed": seed, **overrides})


def no_faults(server) -> None:
    server.configure(fail_rate=0.0, reset_rate=0.0, latency_ms=0)


def fault_count(server) -> int:
    return sum(server.stats()["faults"].values())


def assert_clean(server, bucket: str) -> None:
    """Nothing left behind: no temporary objects, no open multipart uploads."""
    assert server.list_names(bucket, TEMP_PREFIX) == []
    assert server.multipart_uploads(bucket) == []


@pytest.fixture
def chaos_fs(flux_server):
    """A filesystem with the fast retry policy (defaults otherwise)."""
    return make_fs(flux_server, retry=FAST_RETRY)


@pytest.fixture
def storage_options(flux_server) -> dict:
    return server_options(flux_server, retry=FAST_RETRY)

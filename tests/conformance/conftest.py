"""Fixtures for the wire-level suite: a raw-HTTP `Wire` bound to the server under test."""
from __future__ import annotations

import pytest

from .wire import Wire


@pytest.fixture
def wire(gcs_server) -> Wire:
    """Raw HTTP to whichever server `gcs_server` is (use with `any_bucket`)."""
    return Wire(gcs_server.url)


@pytest.fixture
def fwire(flux_server) -> Wire:
    """Raw HTTP to the fluxfs server only (use with `bucket`)."""
    return Wire(flux_server.url)

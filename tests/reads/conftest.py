"""Helpers for the read tests: an object holding the test module's DATA, a second client that changes objects,
and the empty-reserved-prefix check."""
from __future__ import annotations

import pytest

from fluxfs import temporaries
from fluxfs.gcs import bridge, tempnames
from tests.conftest import make_fs


def temp_names(server, fs, bucket: str) -> list[str]:
    """Objects under the reserved prefix, asked of the server itself (not through a lister that hides them)."""
    if hasattr(server, "list_names"):
        return server.list_names(bucket, tempnames.TEMP_PREFIX)
    return [i["name"] for i in bridge.run(fs, temporaries._list_temp, fs, bucket)]


@pytest.fixture
def other(gcs_server):
    """Another client (its own filesystem, simple uploads) that overwrites and deletes behind our back."""
    return make_fs(gcs_server, multipart="resumable")


@pytest.fixture
def quick_retry():
    """fake-gcs-server answers a compose with a missing source by 500: do not spend 10 s retrying it."""
    return {"compose": {"max_attempts": 2, "initial": 0.01}, "default": {"initial": 0.01, "maximum": 0.2}}


@pytest.fixture
def stored(flux_server, bucket, request):
    """A filesystem and the path of one object holding the test module's DATA."""
    fs = make_fs(flux_server)
    fs.pipe_file(f"{bucket}/o", request.module.DATA)
    return fs, f"{bucket}/o"

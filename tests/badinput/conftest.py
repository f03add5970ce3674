"""Shared helpers for the bad-input catalogue (docs/bad-inputs.md): one test per row of the table."""
from __future__ import annotations

from fluxfs.gcs.tempnames import TEMP_PREFIX


def assert_nothing_left(server, bucket: str) -> None:
    """No temporary object and no open multipart upload: a bad input never leaves debris."""
    assert server.list_names(bucket, TEMP_PREFIX) == []
    assert server.multipart_uploads(bucket) == []

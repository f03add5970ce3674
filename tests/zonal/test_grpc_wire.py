"""The BidiReadObjectResponse decoder of the gRPC reads (`grpc_wire`) reads what protobuf reads: every piece's
bytes, offset, crc32c (or its absence) and range end, and the other fields through protobuf."""
from __future__ import annotations

import os

import pytest

from fluxfs.zonal.gcs_adapter import bidi_read_types
from fluxfs.zonal.grpc_wire import ReadAnswer


def test_decoded_as_protobuf_decodes():
    response = bidi_read_types()[1]
    m = response()
    m.metadata.size, m.metadata.generation, m.metadata.checksums.crc32c = 12345, 77, 99
    m.read_handle.handle = b"handle"
    for offset, crc in ((10, 5), (2**40, 0), (0, None)):
        p = m.object_data_ranges.add()
        p.checksummed_data.content = os.urandom(1000) if offset else b""
        if crc is not None:
            p.checksummed_data.crc32c = crc
        p.read_range.read_offset, p.read_range.read_id, p.range_end = offset, 3, offset == 10
    raw = m.SerializeToString()
    got, want = ReadAnswer.FromString(raw), response.FromString(raw)
    assert got.rest.metadata == want.metadata and got.rest.read_handle == want.read_handle
    assert not got.rest.object_data_ranges
    assert [(p.offset, p.content, p.crc32c, p.range_end) for p in got.pieces] == [
        (r.read_range.read_offset, r.checksummed_data.content,
         r.checksummed_data.crc32c if r.checksummed_data.HasField("crc32c") else None, r.range_end)
        for r in want.object_data_ranges]
    assert ReadAnswer.FromString(b"").pieces == []


def test_a_truncated_message_is_refused():
    response = bidi_read_types()[1]
    m = response()
    m.object_data_ranges.add().checksummed_data.content = b"x" * 100
    with pytest.raises((ValueError, IndexError)):
        ReadAnswer.FromString(m.SerializeToString()[:-10])

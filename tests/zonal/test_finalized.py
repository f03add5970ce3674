"""Whether a zonal object is finalized, and its crc32c, come from its metadata's finalize_time and checksums.

google-cloud-storage 3.17's downloader decides `is_finalized` by `finalize_time.second > 0`, the second of the
minute: an object finalized at hh:mm:00 read as unfinalized, so its stream was not pooled and its whole-object
crc32c was not checked (one object in sixty). The metadata here is the library's own message type."""
from __future__ import annotations

import datetime
from types import SimpleNamespace

from google.cloud._storage_v2.types import Object, ObjectChecksums

from fluxfs.zonal.grpc_pool import finalized_crc


def _downloader(**fields):
    return SimpleNamespace(object_metadata=Object(**fields), is_finalized=False)


def test_an_object_finalized_on_the_minute_is_finalized_with_its_crc32c():
    on_the_minute = datetime.datetime(2026, 12, 7, 20, 23, 0, 500000, tzinfo=datetime.timezone.utc)
    mrd = _downloader(finalize_time=on_the_minute, checksums=ObjectChecksums(crc32c=1234))
    assert mrd.object_metadata.finalize_time.second == 0  # what the library's own test looks at
    assert finalized_crc(mrd) == (True, 1234)


def test_an_unfinalized_object_has_no_crc32c_to_check():
    assert finalized_crc(_downloader(checksums=ObjectChecksums(crc32c=1234))) == (False, None)
    assert finalized_crc(SimpleNamespace(object_metadata=None)) == (False, None)


def test_a_finalized_object_without_a_crc32c_is_finalized_and_unchecked():
    at = datetime.datetime(2026, 12, 7, 20, 23, 17, tzinfo=datetime.timezone.utc)
    assert finalized_crc(_downloader(finalize_time=at)) == (True, None)

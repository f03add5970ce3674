"""Servers without XML multipart upload: the default strategy ("xml") falls back to compose uploads
for that filesystem, with one warning, and writes succeed."""
from __future__ import annotations

import warnings

import pytest

from tests.conftest import make_fs, new_bucket_name

from .util import XML_PART, payload, temp_leftovers, write_in_pieces


def _write_two(fs, bucket):
    """Two multipart writes (a handle and a pipe); returns the warnings they raised."""
    first, second = payload(2 * XML_PART + 7, seed=1), payload(XML_PART + 3, seed=2)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with fs.open(f"{bucket}/one", "wb") as f:
            write_in_pieces(f, first)
        fs.pipe_file(f"{bucket}/two", second)
    assert fs.cat(f"{bucket}/one") == first
    assert fs.cat(f"{bucket}/two") == second
    return [w for w in caught if "XML multipart" in str(w.message)]


def test_server_without_xml_multipart(flux_server, bucket):
    flux_server.configure(xml_multipart=False)
    fs = make_fs(flux_server, part_size=XML_PART)
    fell_back = _write_two(fs, bucket)
    assert len(fell_back) == 1, [str(w.message) for w in fell_back]
    assert "compose" in str(fell_back[0].message)
    assert temp_leftovers(flux_server, bucket) == []
    assert flux_server.multipart_uploads(bucket) == []
    # The filesystem remembers the answer: its next writes start as compose uploads.
    assert fs.client.refused.xml_multipart_unsupported is True
    assert not make_fs(flux_server, part_size=XML_PART).client.refused.xml_multipart_unsupported


def test_fake_gcs_server_default_strategy_writes(fake_gcs):
    """fake-gcs-server has no XML multipart upload: the default write still succeeds."""
    b = new_bucket_name()
    fake_gcs.create_bucket(b)
    fs = make_fs(fake_gcs, part_size=XML_PART)
    assert len(_write_two(fs, b)) == 1
    assert temp_leftovers(fake_gcs, b) == []


def test_missing_bucket_is_not_a_fallback(flux_server):
    """A 404 because the bucket does not exist stays FileNotFoundError, and XML stays on."""
    fs = make_fs(flux_server, part_size=XML_PART)
    with pytest.raises(FileNotFoundError):
        with fs.open(f"{new_bucket_name()}/x", "wb") as f:
            f.write(payload(2 * XML_PART))
    assert not fs.client.refused.xml_multipart_unsupported


def test_fallback_parts_fit_the_compose_cap(flux_server, bucket, monkeypatch):
    """After falling back, the parts still to come grow under compose's (lower) component cap."""
    from fluxfs.writes import settings
    from fluxfs.writes.compose import ComposeUploader
    from fluxfs.writes.xml import XmlUploader

    from .util import KiB
    part, cap, limit = 256 * KiB, 16, 40 * 256 * KiB
    monkeypatch.setattr(XmlUploader, "max_parts", 40)
    for cls in (XmlUploader, ComposeUploader):
        monkeypatch.setattr(cls, "max_object_size", limit)
    monkeypatch.setattr(settings, "XML_MIN_PART_SIZE", part)
    flux_server.configure(xml_multipart=False, max_components=cap)
    fs = make_fs(flux_server, part_size=part, write_concurrency=2, compose_max_components=cap)
    data = payload(limit, seed=9)
    with pytest.warns(RuntimeWarning, match="XML multipart"):
        with fs.open(f"{bucket}/big", "wb") as f:
            write_in_pieces(f, data, piece=77_777)
    assert f._writer.parts <= cap
    assert fs.cat(f"{bucket}/big") == data
    assert temp_leftovers(flux_server, bucket) == []


def test_known_size_write_cut_for_xml_fails_clearly_then_succeeds(flux_server, bucket, monkeypatch):
    """pipe_file cuts a known size into equal parts before the fallback is known: past compose's cap the
    first write fails naming why (nothing left behind), and the same write then succeeds."""
    from .util import KiB
    flux_server.configure(xml_multipart=False, max_components=4)
    fs = make_fs(flux_server, part_size=XML_PART, write_concurrency=2, compose_max_components=4)
    data = payload(5 * XML_PART + 3 * KiB, seed=4)
    with pytest.warns(RuntimeWarning, match="XML multipart"):
        with pytest.raises(ValueError, match=r"/big: the server has no XML multipart upload, and the compose "
                                             r"upload this write fell back to takes at most 4 parts.*write it again"):
            fs.pipe_file(f"{bucket}/big", data)
    assert not fs.exists(f"{bucket}/big") and temp_leftovers(flux_server, bucket) == []
    fs.pipe_file(f"{bucket}/big", data)
    assert fs.cat(f"{bucket}/big") == data

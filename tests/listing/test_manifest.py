"""Manifests: written from a listing, read back in both forms, bad lines reported by line number."""
from __future__ import annotations

import io
import json

import pytest

from fluxfs.listing.manifest import ManifestEntry, read_manifest
from tests.conftest import make_fs

from .helpers import put_keys


@pytest.fixture
def listed(flux_server, bucket):
    fs = make_fs(flux_server, list_page_size=4, list_concurrency=8)
    keys = ["a/1", "a/2", "b/é 中", "c"]
    put_keys(fs, bucket, keys)
    return fs, bucket, {f"{bucket}/{k}": fs.info(f"{bucket}/{k}") for k in keys}


def _check_entries(entries, infos):
    assert [e.name for e in entries] == sorted(infos)
    for e in entries:
        info = infos[e.name]
        assert (e.size, e.generation, e.crc32c) == (info["size"], info["generation"], info["crc32c"])


def test_round_trip_local_path(listed, tmp_path):
    fs, bucket, infos = listed
    out = tmp_path / "m.jsonl"
    assert fs.write_manifest(bucket, str(out)) == 4
    lines = out.read_text(encoding="utf-8").splitlines()
    assert len(lines) == 4 and set(json.loads(lines[0])) == {"name", "size", "generation", "crc32c"}
    _check_entries(read_manifest(out), infos)
    assert not [p for p in tmp_path.iterdir() if p.name != "m.jsonl"], "temporary file left behind"


def test_round_trip_file_objects(listed):
    fs, bucket, infos = listed
    text, binary = io.StringIO(), io.BytesIO()
    assert fs.write_manifest(bucket, text) == 4
    assert fs.write_manifest(bucket, binary) == 4
    assert binary.getvalue().decode("utf-8") == text.getvalue()
    _check_entries(read_manifest(io.StringIO(text.getvalue())), infos)
    _check_entries(read_manifest(io.BytesIO(binary.getvalue())), infos)


def test_round_trip_flux_url(listed):
    fs, bucket, infos = listed
    assert fs.write_manifest(f"{bucket}/a", f"flux://{bucket}/manifests/a.jsonl") == 2
    entries = read_manifest(f"{bucket}/manifests/a.jsonl", fs=fs)
    _check_entries(entries, {k: v for k, v in infos.items() if k.startswith(f"{bucket}/a/")})


def test_failed_listing_leaves_no_manifest(flux_server, tmp_path):
    fs = make_fs(flux_server)
    out = tmp_path / "m.jsonl"
    with pytest.raises(FileNotFoundError, match="no-such-bucket-m"):
        fs.write_manifest("no-such-bucket-m", str(out))
    assert list(tmp_path.iterdir()) == []


def test_tab_form_and_base(tmp_path):
    p = tmp_path / "m.txt"
    p.write_text("# comment\nbkt/img/1.jpg\t3\n\nbkt/img/2.jpg\tcat\nbkt/img/3.jpg\n", encoding="utf-8")
    assert read_manifest(p) == [ManifestEntry("bkt/img/1.jpg", label="3"), ManifestEntry("bkt/img/2.jpg", label="cat"),
                                ManifestEntry("bkt/img/3.jpg")]
    p.write_text("1.jpg\t0\nsub/2.jpg\t1\n", encoding="utf-8")
    assert [e.name for e in read_manifest(p, base="flux://bkt/img/")] == ["bkt/img/1.jpg", "bkt/img/sub/2.jpg"]


def test_json_lines_with_label_and_protocol(tmp_path):
    p = tmp_path / "m.jsonl"
    p.write_text('{"name": "flux://bkt/a", "size": "7", "generation": 12, "label": [1, 2]}\n', encoding="utf-8")
    assert read_manifest(p) == [ManifestEntry("bkt/a", 7, "12", None, [1, 2])]


@pytest.mark.parametrize("bad, why", [
    ('{"name": "bkt/a", "size": 1', "invalid JSON"),
    ('{"size": 1}', '"name"'),
    ('{"name": "bkt/a", "size": -1}', "non-negative"),
    ('{"name": "bkt/a", "size": "big"}', "integer"),
    ('["bkt/a"]', "must be an object"),
    ("\tlabel", "empty key"),
    ("bkt/a\tx\ty", "more than one tab"),
    ("nobucket\t1", "no bucket"),
])
def test_bad_line_names_the_line(tmp_path, bad, why):
    p = tmp_path / "m.jsonl"
    p.write_text('{"name": "bkt/ok", "size": 1}\n\n' + bad + "\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"line 3") as err:
        read_manifest(p)
    assert why in str(err.value) and str(p) in str(err.value)


def test_not_utf8_names_the_line(tmp_path):
    p = tmp_path / "m.txt"
    p.write_bytes(b"bkt/a\t1\nbkt/\xff\t2\n")
    with pytest.raises(ValueError, match="line 2: not UTF-8"):
        read_manifest(p)

"""`fluxfs` as an outside user meets it: summaries without -q, names with NUL bytes, help text, start-up.

Commands run in-process through `fluxfs.cli.main` (the `cli` fixture of test_cli.py) or, where what
matters is the process (its imports, its real stdout/stderr), as a subprocess against the embedded server.
"""
from __future__ import annotations

import pytest

from tests.cli.test_cli import assert_clean_failure, cli  # noqa: F401 - `cli` is a fixture


# -- summaries: every command's non-quiet path ---------------------------------------------

def test_sample_images_to_a_bucket_prints_its_summary(cli, fs, bucket):
    r = cli("sample-images", "--count", "6", f"flux://{bucket}/imgs/")
    assert r.code == 0, r.err
    assert "Traceback" not in r.err and "UnboundLocalError" not in r.err
    assert f"wrote 6 JPEG images of 4 classes" in r.err and f"flux://{bucket}/imgs/<class>/<n>.jpg" in r.err, r.err
    assert len(fs.find(f"{bucket}/imgs")) == 6


# -- names fluxfs cannot write -------------------------------------------------------------

def test_cp_refuses_an_object_name_with_a_nul_byte_naming_the_nul(cli, fs, bucket, tmp_path):
    fs.pipe({f"{bucket}/ds/ok": b"fine", f"{bucket}/ds/bad\x00name": b"nul"})
    dest = tmp_path / "dest"
    r = cli("-q", "cp", "-r", f"flux://{bucket}/ds", str(dest))
    assert_clean_failure(r, 2, "refusing", "NUL", "nothing was copied")
    assert "'.' or '..'" not in r.err, r.err
    assert "\\x00" in r.err  # the name as printed shows where the NUL is
    assert not dest.exists()


@pytest.mark.parametrize("name, why", [
    (b"bad\xffname.txt", "not valid UTF-8"),
    (b"line\nfeed.txt", "carriage return or line feed"),
    (b"x" * 250 + b".txt", "over GCS's limit of 1024"),
])
def test_cp_refuses_a_local_name_gcs_would_refuse_before_copying_anything(cli, fs, bucket, tmp_path, name, why):
    src = tmp_path / "src"
    deep = src / ("d" * 250) / ("e" * 250) / ("f" * 250) / ("g" * 250)  # with the long name: over 1024 bytes
    deep.mkdir(parents=True)
    (src / "ok.txt").write_bytes(b"fine")
    with open(bytes(deep) + b"/" + name, "wb") as f:
        f.write(b"data")
    r = cli("-q", "cp", "-r", str(src), f"flux://{bucket}/up/")
    assert_clean_failure(r, 2, "refusing to copy", why, "nothing was copied")
    shown = name.decode("utf-8", "backslashreplace").replace("\n", "\\x0a")
    assert shown in r.err, r.err
    assert fs.find(f"{bucket}/up") == []  # not even ok.txt: refused before any byte moved

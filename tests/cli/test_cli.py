"""The `fluxfs` command end to end against the embedded server: output, bytes, exit codes, error messages.

Most tests call `fluxfs.cli.main(argv)` in-process (the console script's entry point, with
stdout/stderr captured); a few run the installed `fluxfs` script as a subprocess.
"""
from __future__ import annotations

import contextlib
import io
import json
import os
import urllib.request
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from fluxfs.gcs import tempnames
from fluxfs.cli import main

FLUXFS = str(Path(sys.executable).parent / "fluxfs")


@dataclass
class Run:
    code: int
    out: bytes
    err: str

    @property
    def text(self) -> str:
        return self.out.decode()

    @property
    def lines(self) -> list[str]:
        return self.text.splitlines()


@pytest.fixture
def cli(flux_server):
    """Run `fluxfs --endpoint <server> ARGS...` in-process and capture what it prints."""

    def run(*argv: str, endpoint: str | None = flux_server.url) -> Run:
        raw = io.BytesIO()
        out = io.TextIOWrapper(raw, encoding="utf-8", write_through=True)
        err = io.StringIO()
        prefix = ["--endpoint", endpoint] if endpoint else []
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main([*prefix, *argv])
        out.flush()
        return Run(code, raw.getvalue(), err.getvalue())

    return run


def assert_clean_failure(r: Run, code: int, *needles: str) -> None:
    """The command failed with `code`, said why in one message naming `needles`, and showed no traceback."""
    assert r.code == code, (r.code, r.err)
    assert "Traceback" not in r.err
    for n in needles:
        assert n in r.err, (n, r.err)


@pytest.fixture
def tree(flux_server, bucket):
    """a/ holds 5 x 100 bytes, b/c/ holds 3 x 1000 bytes."""
    flux_server.generate(bucket, 5, 100, prefix="a/")
    flux_server.generate(bucket, 3, 1000, prefix="b/c/")
    return bucket


# -- listing ------------------------------------------------------------------------------

def test_ls_one_level_long_and_recursive(cli, tree, flux_server, fs):
    r = cli("ls", f"flux://{tree}")
    assert r.code == 0 and r.lines == [f"flux://{tree}/a/", f"flux://{tree}/b/"]

    r = cli("ls", "-l", f"flux://{tree}/a/")
    assert r.code == 0 and len(r.lines) == 5
    for i, line in enumerate(r.lines):
        size, *_, generation, url = line.split()
        assert (int(size), url) == (100, f"flux://{tree}/a/{i:08d}")
        # -l promises the generation: the one the server holds for that object
        assert generation == str(fs.info(f"{tree}/a/{i:08d}")["generation"])

    r = cli("ls", "-r", f"flux://{tree}")
    expected = [f"flux://{tree}/{k}" for k in sorted(flux_server.list_names(tree))]
    assert r.code == 0 and r.lines == expected and len(expected) == 8

    r = cli("ls", "-r", "--unsorted", f"gs://{tree}/b")  # gs:// is accepted and echoed back
    assert r.code == 0 and sorted(r.lines) == [f"gs://{tree}/b/c/{i:08d}" for i in range(3)]

    assert f"flux://{tree}/" in cli("ls", "flux://").lines


@pytest.mark.slow
def test_progress_bars_only_on_a_terminal_unless_asked(cli, tree, flux_server):
    flux_server.configure(latency_ms=1300)  # the listing lasts over tqdm's one-second delay
    r = cli("ls", "-r", f"flux://{tree}")  # stderr captured: not a terminal, so no bar
    assert r.code == 0 and len(r.lines) == 8
    assert "objects" not in r.err and "\r" not in r.err, r.err
    r = cli("--progress", "ls", "-r", f"flux://{tree}")
    assert r.code == 0 and "listing" in r.err and "objects" in r.err, r.err
    r = cli("--progress", "-q", "ls", "-r", f"flux://{tree}")  # -q still wins
    assert r.code == 0 and r.err == "", r.err


def test_du_per_prefix_and_summary(cli, tree):
    r = cli("du", f"flux://{tree}")
    assert r.code == 0
    rows = [line.split("\t") for line in r.lines]
    assert rows[:2] == [["500", "5", f"flux://{tree}/a/"], ["3000", "3", f"flux://{tree}/b/"]]
    assert rows[-1][:2] == ["3500", "8"]

    r = cli("du", "-s", f"flux://{tree}/b")
    assert r.code == 0 and len(r.lines) == 1 and r.lines[0].split("\t")[:2] == ["3000", "3"]
    assert_clean_failure(cli("du", f"flux://{tree}/none"), 3, f"flux://{tree}/none")


def test_manifest_lists_every_object(cli, tree, tmp_path, fs):
    r = cli("manifest", f"flux://{tree}/a")
    assert r.code == 0
    entries = [json.loads(line) for line in r.lines]
    infos = fs.find(f"{tree}/a", detail=True)
    assert {e["name"] for e in entries} == set(infos)
    for e in entries:
        assert e["size"] == 100 and e["crc32c"] == infos[e["name"]]["crc32c"]

    out = tmp_path / "m.jsonl"
    r = cli("-q", "manifest", f"flux://{tree}", "--out", str(out))
    assert r.code == 0 and len(out.read_text().splitlines()) == 8


# -- cat and cp ---------------------------------------------------------------------------

def test_cat_writes_exact_bytes(cli, fs, bucket):
    one, two = os.urandom(70_000), bytes(range(256)) * 3
    fs.pipe({f"{bucket}/x/one": one, f"{bucket}/x/two": two})
    r = cli("cat", f"flux://{bucket}/x/one", f"flux://{bucket}/x/two")
    assert r.code == 0 and r.out == one + two


def _make_tree(root: Path) -> dict[str, bytes]:
    files = {
        "top.bin": os.urandom(1234),
        "empty": b"",
        "nested/deeper/ünï cødé.txt": "snow ☃\n".encode(),
        "nested/big.bin": os.urandom(6 * 1024 * 1024 + 17),  # over one 5 MiB part: a multipart upload
    }
    for rel, data in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)
    return files


def test_cp_recursive_round_trip(cli, fs, bucket, tmp_path):
    files = _make_tree(tmp_path / "src")
    r = cli("-q", "-o", "part_size=5242880", "cp", "-r", str(tmp_path / "src"), f"flux://{bucket}/up/")
    assert r.code == 0, r.err
    assert sorted(fs.find(f"{bucket}/up")) == sorted(f"{bucket}/up/src/{k}" for k in files)
    for rel, data in files.items():
        assert fs.cat(f"{bucket}/up/src/{rel}") == data

    r = cli("-q", "cp", "-r", f"flux://{bucket}/up/src", str(tmp_path / "down"))
    assert r.code == 0, r.err
    got = {str(p.relative_to(tmp_path / "down")): p.read_bytes()
           for p in (tmp_path / "down").rglob("*") if p.is_file()}
    assert got == files  # no temporary download files left behind either


def test_cp_single_files_both_ways(cli, fs, bucket, tmp_path):
    data = os.urandom(5000)
    (tmp_path / "f.bin").write_bytes(data)
    assert cli("-q", "cp", str(tmp_path / "f.bin"), f"flux://{bucket}/named.bin").code == 0
    assert cli("-q", "cp", str(tmp_path / "f.bin"), f"flux://{bucket}/dir/").code == 0
    assert fs.cat(f"{bucket}/named.bin") == data and fs.cat(f"{bucket}/dir/f.bin") == data

    (tmp_path / "out").mkdir()
    assert cli("-q", "cp", f"flux://{bucket}/named.bin", str(tmp_path / "out")).code == 0
    assert (tmp_path / "out" / "named.bin").read_bytes() == data

    # -n (no clobber) skips an existing destination and says so, and the object already there is left
    # exactly as it was, even when the skipped upload carries other bytes.
    (tmp_path / "g.bin").write_bytes(b"other bytes")
    r = cli("cp", "-n", str(tmp_path / "g.bin"), f"flux://{bucket}/named.bin")
    assert r.code == 0 and f"skipped 1 existing destination(s) (cp -n):\n  flux://{bucket}/named.bin" in r.err
    fs.invalidate_cache()
    assert fs.cat(f"{bucket}/named.bin") == data
    fs.pipe(f"{bucket}/other.bin", b"other bytes")
    r = cli("cp", "-n", f"flux://{bucket}/other.bin", str(tmp_path / "out" / "named.bin"))
    assert r.code == 0 and "skipped 1 existing" in r.err and (tmp_path / "out" / "named.bin").read_bytes() == data


def test_cp_trailing_slash_on_the_destination_nests_as_documented(cli, fs, bucket, tmp_path):
    for rel in ("top.bin", "sub/x.bin"):
        (tmp_path / "images" / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "images" / rel).write_bytes(b"data")
    src = f"{tmp_path}/images/"  # a '/' on the source changes nothing
    for dst, expect in ((f"flux://{bucket}/data/", "data/images/"), (f"flux://{bucket}/flat", "flat/")):
        assert cli("-q", "cp", "-r", src, dst).code == 0
        assert sorted(fs.find(f"{bucket}/{expect}")) == [f"{bucket}/{expect}sub/x.bin", f"{bucket}/{expect}top.bin"]
    (tmp_path / "exists").mkdir()
    for dst, expect in (("nested/", "nested/images"), ("flat", "flat"), ("exists", "exists/images")):
        assert cli("-q", "cp", "-r", f"flux://{bucket}/data/images", f"{tmp_path}/{dst}").code == 0
        assert (tmp_path / expect / "sub" / "x.bin").read_bytes() == b"data", dst
    r = cli("cp", "--help")
    assert r.code == 0 and "trailing-slash rule of `gcloud storage cp`" in r.text
    assert "cp -r ./images flux://b/data/   ->  flux://b/data/images/..." in r.text


def test_cp_copies_between_buckets(cli, fs, flux_server, bucket):
    other = bucket + "-copy"
    flux_server.create_bucket(other)
    fs.pipe({f"{bucket}/p/1": b"one", f"{bucket}/p/q/2": b"two"})
    r = cli("-q", "cp", "-r", f"flux://{bucket}/p", f"flux://{other}/")
    assert r.code == 0, r.err
    assert fs.cat([f"{other}/p/1", f"{other}/p/q/2"]) == {f"{other}/p/1": b"one", f"{other}/p/q/2": b"two"}


def test_cp_refuses_object_names_that_escape_the_destination(cli, fs, bucket, tmp_path):
    fs.pipe({f"{bucket}/ds/ok": b"fine", f"{bucket}/ds/../../escaped": b"evil"})
    dest = tmp_path / "work" / "dest"
    dest.parent.mkdir()
    r = cli("-q", "cp", "-r", f"flux://{bucket}/ds", str(dest))
    assert_clean_failure(r, 2, "refusing", "../../escaped", "nothing was copied")
    assert not dest.exists()  # checked before anything was written, so not even ds/ok
    assert not any(p.name == "escaped" for p in tmp_path.rglob("*"))


def test_cp_refuses_to_follow_a_symlink_out_of_the_destination(cli, fs, bucket, tmp_path):
    outside, dest = tmp_path / "outside", tmp_path / "dest"
    outside.mkdir()
    (dest / "ds").mkdir(parents=True)  # dest exists, so `cp -r .../ds dest` writes under dest/ds/
    (dest / "ds" / "link").symlink_to(outside, target_is_directory=True)
    fs.pipe({f"{bucket}/ds/link/x": b"evil"})
    r = cli("-q", "cp", "-r", f"flux://{bucket}/ds", str(dest))
    assert_clean_failure(r, 2, "refusing", "outside")
    assert list(outside.iterdir()) == []


# -- errors -------------------------------------------------------------------------------

def test_clear_errors_and_exit_codes(cli, bucket, tmp_path):
    assert_clean_failure(cli("ls", "flux://no-such-bucket-x1"), 3, "bucket 'no-such-bucket-x1' does not exist")
    assert_clean_failure(cli("ls", f"flux://{bucket}/nothing/here"), 3, f"flux://{bucket}/nothing/here")
    assert_clean_failure(cli("cat", f"flux://{bucket}/missing"), 3, f"no such object: flux://{bucket}/missing")
    assert_clean_failure(cli("du", "s3://bucket/x"), 2, "unsupported URL scheme 's3'")
    assert_clean_failure(cli("ls", "flux://Bad_Bucket"), 2, "invalid bucket name 'Bad_Bucket'")
    assert_clean_failure(cli("ls", "flux:///key"), 2, "no bucket")
    assert_clean_failure(cli("-o", "compose_typo=1", "ls", f"flux://{bucket}"), 2, "compose_typo")
    assert_clean_failure(cli("-o", "part_sise=1", "ls", f"flux://{bucket}"), 2,
                         "unknown storage option(s) 'part_sise' (did you mean 'part_size'?)")
    assert_clean_failure(cli("-o", "multipart=sideways", "ls", f"flux://{bucket}"), 2, "multipart")
    assert_clean_failure(cli("cp", str(tmp_path), str(tmp_path / "x")), 2, "flux://")
    assert_clean_failure(cli("cp", f"flux://{bucket}/p", str(tmp_path)), 3, f"flux://{bucket}/p")
    assert_clean_failure(cli("cleanup", f"flux://{bucket}", "--older-than", "soon"), 2, "soon")
    assert cli("ls").code == 0  # no URL: the buckets
    assert cli("frobnicate").code == 2  # argparse's own usage error


def test_permission_denied_and_token(cli, flux_server, bucket, monkeypatch):
    token = "cli-test-token-6c1f0e"
    flux_server.configure(require_token=token)
    r = cli("ls", f"flux://{bucket}")
    assert_clean_failure(r, 4, "permission denied")
    # A raw access token, as gcsfs takes it; FETCH_RAW_TOKEN_EXPIRY=false keeps gcsfs from asking
    # Google's tokeninfo endpoint about it (this machine talks to 127.0.0.1 only).
    monkeypatch.setenv("FETCH_RAW_TOKEN_EXPIRY", "false")
    r = cli("-o", f"token={token}", "ls", f"flux://{bucket}")
    assert r.code == 0, r.err
    r = cli("-o", "token=wrong", "--debug", "ls", f"flux://{bucket}")
    assert r.code == 4 and token not in r.err


def test_unreachable_endpoint_fails_fast(cli):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again below: nothing listens there
    t0 = time.monotonic()
    r = cli("ls", "flux://some-bucket", endpoint=f"http://127.0.0.1:{port}")
    assert_clean_failure(r, 1, "cannot reach the storage endpoint", str(port))
    assert time.monotonic() - t0 < 10
    assert_clean_failure(cli("ls", "flux://b-x", endpoint="127.0.0.1:12x"), 2, "bad endpoint")


def test_endpoint_without_scheme_works_as_in_storage_emulator_host(cli, tree, flux_server, monkeypatch):
    hostport = flux_server.url.split("://", 1)[1]
    r = cli("ls", f"flux://{tree}", endpoint=hostport)
    assert r.code == 0 and r.lines == [f"flux://{tree}/a/", f"flux://{tree}/b/"], r.err
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", hostport)
    r = cli("ls", f"flux://{tree}", endpoint=None)
    assert r.code == 0 and r.lines == [f"flux://{tree}/a/", f"flux://{tree}/b/"], r.err


def test_cp_of_a_prefix_without_r_hints_at_r(cli, tree, tmp_path):
    for src in (f"flux://{tree}/a/", f"flux://{tree}/a"):
        assert_clean_failure(cli("cp", src, str(tmp_path)), 2, src, "use cp -r")
    assert_clean_failure(cli("cp", f"flux://{tree}/nothing/", str(tmp_path)), 3, "no objects under", "use cp -r")
    assert list(tmp_path.iterdir()) == []


def test_debug_shows_the_traceback(cli):
    r = cli("--debug", "ls", "flux://no-such-bucket-x2")
    assert r.code == 3 and "Traceback" in r.err


def test_cleanup_removes_only_temporaries(cli, fs, bucket):
    temp = f"{bucket}/{tempnames.temp_key('1-host-1-dead', 'compose')}"
    fs.pipe_file(temp, b"left over", metadata=tempnames.marker("1-host-1-dead"))
    fs.pipe_file(f"{bucket}/keep", b"data")
    r = cli("cleanup", f"flux://{bucket}", "--older-than", "0")
    assert r.code == 0 and "removed 1 temporary object" in r.err
    fs.invalidate_cache()
    assert not fs.exists(temp) and fs.cat(f"{bucket}/keep") == b"data"


def test_cleanup_aborts_unfinished_multipart_uploads(cli, fs, flux_server, bucket):
    """An XML multipart upload fluxfs did not start (here: plain HTTP; parts uploaded, never completed) is
    reported by cleanup, and aborted only with --abort-foreign-uploads."""
    url = fs.client.xml_url(bucket, "ckpt/model.pt")
    started = urllib.request.urlopen(urllib.request.Request(f"{url}?uploads", method="POST"), timeout=30).read()
    upload_id = started.decode().split("<UploadId>")[1].split("</UploadId>")[0]
    part = urllib.request.Request(f"{url}?partNumber=1&uploadId={upload_id}", data=b"p" * 1024, method="PUT")
    urllib.request.urlopen(part, timeout=30).read()
    assert len(flux_server.multipart_uploads(bucket)) == 1
    r = cli("cleanup", f"flux://{bucket}")  # the default --older-than 1h spares a running job's upload
    assert r.code == 0 and "aborted 0 unfinished upload" in r.err
    assert len(flux_server.multipart_uploads(bucket)) == 1
    r = cli("cleanup", f"flux://{bucket}", "--older-than", "0")
    assert r.code == 0 and "aborted 0 unfinished upload" in r.err
    assert (f"left 1 unfinished upload(s) that fluxfs did not start (abort them with --abort-foreign-uploads): "
            f"{bucket}/ckpt/model.pt") in r.err
    assert len(flux_server.multipart_uploads(bucket)) == 1
    r = cli("cleanup", f"flux://{bucket}", "--older-than", "0", "--abort-foreign-uploads")
    assert r.code == 0 and "aborted 1 unfinished upload" in r.err
    assert flux_server.multipart_uploads(bucket) == []
    assert flux_server.list_names(bucket) == []


def test_mb_makes_a_bucket_once(cli, fs):
    name = "mb-" + os.urandom(6).hex()
    r = cli("mb", f"flux://{name}")
    assert r.code == 0 and r.err.strip() == f"created bucket flux://{name}"
    assert cli("-q", "mb", f"flux://{name}-quiet").err == ""
    assert f"flux://{name}/" in cli("ls", "flux://").lines
    assert_clean_failure(cli("mb", f"flux://{name}"), 5, "exists")
    assert_clean_failure(cli("mb", f"flux://{name}/key"), 2, "bucket URL")


def test_bench_passes_its_arguments_through(cli, capfd):
    assert cli("bench", "--help").code == 0  # python -m bench --help, run from the checkout
    assert "python -m bench" in capfd.readouterr().out


# -- the installed console script -----------------------------------------------------------

@pytest.mark.slow
def test_console_script(flux_server, bucket):
    env = dict(os.environ, STORAGE_EMULATOR_HOST=flux_server.url)
    ok = subprocess.run([FLUXFS, "ls", f"flux://{bucket}"], env=env, capture_output=True, text=True, timeout=60)
    assert ok.returncode == 0, ok.stderr
    missing = subprocess.run([FLUXFS, "ls", "flux://no-such-bucket-x3"], env=env, capture_output=True,
                             text=True, timeout=60)
    assert missing.returncode == 3 and "does not exist" in missing.stderr and "Traceback" not in missing.stderr
    version = subprocess.run([FLUXFS, "--version"], capture_output=True, text=True, timeout=60)
    assert version.returncode == 0 and version.stdout.startswith("fluxfs ")


@pytest.mark.slow
def test_serve_prints_its_url_and_serves(tmp_path):
    proc = subprocess.Popen([FLUXFS, "serve", "--port", "0"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        url = proc.stdout.readline().strip()
        assert url.startswith("http://127.0.0.1:")
        said = proc.stderr.readline() + proc.stderr.readline()
        assert "data in memory" in said and "loopback" in said, said
        assert f"export STORAGE_EMULATOR_HOST={url} FSSPEC_FLUX_TOKEN=anon\n" in said, said
        from fluxfs.server.handle import ServerHandle

        h = ServerHandle(url)
        h.create_bucket("served")
        r = subprocess.run([FLUXFS, "--endpoint", url, "ls", "flux://"], capture_output=True, text=True, timeout=60)
        assert r.returncode == 0 and "flux://served/" in r.stdout.splitlines()
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        proc.stdout.close()
        proc.stderr.close()


@pytest.mark.slow
def test_serve_has_a_fixed_default_port_and_says_where_data_lives(tmp_path):
    from fluxfs.cli.parser import build_parser

    assert build_parser().parse_args(["serve"]).port == 9023  # documented in the README
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        r = subprocess.run([FLUXFS, "serve", "--port", str(port), "--root", str(tmp_path)], capture_output=True,
                           text=True, timeout=60)
    assert r.returncode == 1 and r.stdout == "" and "Traceback" not in r.stderr
    assert f"cannot listen on 127.0.0.1:{port}" in r.stderr and "--port 0" in r.stderr, r.stderr
    proc = subprocess.Popen([FLUXFS, "serve", "--port", "0", "--root", str(tmp_path)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        url = proc.stdout.readline().strip()
        said = proc.stderr.readline()
        assert f"{url}, data under --root {tmp_path}" in said, said
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        proc.stdout.close()
        proc.stderr.close()


# -- cp -n, directory markers ---------------------------------------------------------------

@pytest.mark.parametrize("direction", ["upload", "download", "bucket-to-bucket"])
def test_cp_no_clobber_skips_existing_and_reports_them_the_same_way_in_every_direction(
        cli, fs, flux_server, bucket, tmp_path, direction):
    new = {f"f{i}": f"new {i}".encode() for i in range(10)}
    src = tmp_path / "src"
    src.mkdir()
    for name, data in new.items():
        (src / name).write_bytes(data)
    fs.pipe({f"{bucket}/src/{name}": data for name, data in new.items()})
    if direction == "upload":
        dst, args = f"flux://{bucket}/dst", [str(src), f"flux://{bucket}/dst"]
        fs.pipe(f"{bucket}/dst/f3", b"old")
        read = lambda name: (fs.invalidate_cache() or fs.cat(f"{bucket}/dst/{name}"))  # noqa: E731
        shown = f"{dst}/f3"
    elif direction == "download":
        dst = tmp_path / "dst"  # exists, so the copy lands in dst/src/
        (dst / "src").mkdir(parents=True)
        (dst / "src" / "f3").write_bytes(b"old")
        args = [f"flux://{bucket}/src", str(dst)]
        read = lambda name: (dst / "src" / name).read_bytes()  # noqa: E731
        shown = str(dst / "src" / "f3")
    else:
        dst, args = f"flux://{bucket}/dst", [f"flux://{bucket}/src", f"flux://{bucket}/dst"]
        fs.pipe(f"{bucket}/dst/f3", b"old")
        read = lambda name: (fs.invalidate_cache() or fs.cat(f"{bucket}/dst/{name}"))  # noqa: E731
        shown = f"{dst}/f3"
    r = cli("cp", "-r", "-n", *args)
    assert r.code == 0, r.err
    assert "copied 9 file(s)" in r.err and f"skipped 1 existing destination(s) (cp -n):\n  {shown}\n" in r.err
    assert read("f3") == b"old"  # left as it was
    assert all(read(name) == data for name, data in new.items() if name != "f3")


def test_cp_reports_an_object_named_like_a_directory_that_holds_data(cli, fs, bucket, tmp_path):
    fs.pipe({f"{bucket}/ds/a": b"a", f"{bucket}/ds/sub/": b"", f"{bucket}/ds/sub/b": b"b",
             f"{bucket}/ds/odd/": b"12 bytes....", f"{bucket}/ds/odd/c": b"c"})
    r = cli("cp", "-r", f"flux://{bucket}/ds", str(tmp_path / "out"))
    assert r.code == 1, r.err
    assert (f"not copied: flux://{bucket}/ds/odd/ holds 12 bytes but its name ends in '/'" in r.err
            and f"fluxfs cat flux://{bucket}/ds/odd/ > FILE" in r.err), r.err
    got = sorted(str(p.relative_to(tmp_path / "out")) for p in (tmp_path / "out").rglob("*") if p.is_file())
    assert got == ["a", "odd/c", "sub/b"]  # everything else was copied; the zero-byte marker silently skipped
    r = cli("-q", "cp", "-r", f"flux://{bucket}/ds", f"flux://{bucket}/copy")  # object to object: as is
    assert r.code == 0, r.err
    assert fs.cat(f"{bucket}/copy/odd/") == b"12 bytes...." and fs.cat(f"{bucket}/copy/sub/") == b""


# -- sample-images --------------------------------------------------------------------------

def test_sample_images_writes_labelled_images_that_pil_opens(cli, fs, bucket, tmp_path):
    from PIL import Image

    r = cli("sample-images", "--count", "12", str(tmp_path / "images"))
    assert r.code == 0 and "wrote 12 JPEG images of 4 classes" in r.err, r.err
    files = sorted(p.relative_to(tmp_path / "images").as_posix() for p in (tmp_path / "images").rglob("*.jpg"))
    assert len(files) == 12 and {f.split("/")[0] for f in files} == {"circle", "cross", "square", "triangle"}
    with Image.open(tmp_path / "images" / files[0]) as im:
        assert im.format == "JPEG" and im.size == (64, 64)

    r = cli("-q", "sample-images", "--count", "8", "--format", "png", f"flux://{bucket}/png/")
    assert r.code == 0, r.err
    names = sorted(fs.find(f"{bucket}/png"))
    assert len(names) == 8 and all(fs.cat(n)[:8] == b"\x89PNG\r\n\x1a\n" for n in names)

    before = (tmp_path / "images" / files[0]).read_bytes()
    assert_clean_failure(cli("sample-images", str(tmp_path / "images")), 2, "is not an empty directory")
    assert (tmp_path / "images" / files[0]).read_bytes() == before
    assert_clean_failure(cli("sample-images", "flux://no-such-bucket-x9/images/"), 3, "does not exist")

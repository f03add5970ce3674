"""What is fluxfs's to hide, delete or abort, and what is not (docs/bad-inputs.md, "Objects under the
reserved prefix"): another client's multipart uploads survive `fluxfs cleanup`; temporaries leave no
noncurrent versions in a versioned bucket; a user's object merely named like a temporary is listed."""
from __future__ import annotations

import contextlib
import io
import json
import subprocess
import sys
import textwrap
import urllib.request

import pytest

from fluxfs import temporaries
from fluxfs.cli import main
from fluxfs.gcs import bridge, tempnames
from tests.conftest import make_fs, new_bucket_name


def _cli(server, *args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
        code = main(["--endpoint", server.url, *args])
    return code, out.getvalue(), err.getvalue()


def _raw_upload(fs, bucket: str, key: str, data: bytes) -> str:
    """An XML multipart upload started by another client (plain HTTP), one part sent; its upload id."""
    url = fs.client.xml_url(bucket, key)
    started = urllib.request.urlopen(urllib.request.Request(f"{url}?uploads", method="POST"), timeout=30).read()
    upload_id = started.decode().split("<UploadId>")[1].split("</UploadId>")[0]
    part = urllib.request.Request(f"{url}?partNumber=1&uploadId={upload_id}", data=data, method="PUT")
    with urllib.request.urlopen(part, timeout=30) as resp:
        etag = resp.headers["ETag"]
    return upload_id, etag


def _raw_complete(fs, bucket: str, key: str, upload_id: str, etag: str) -> int:
    body = f"<CompleteMultipartUpload><Part><PartNumber>1</PartNumber><ETag>{etag}</ETag></Part>" \
           f"</CompleteMultipartUpload>".encode()
    req = urllib.request.Request(f"{fs.client.xml_url(bucket, key)}?uploadId={upload_id}", data=body, method="POST")
    with urllib.request.urlopen(req, timeout=30) as resp:
        return resp.status


def _crashed_xml_writer(server, bucket: str, key: str) -> None:
    """A fluxfs XML multipart write whose process died (no close, no atexit) after sending parts."""
    script = textwrap.dedent(f"""
        import os, time
        from fluxfs import FluxFileSystem
        from fluxfs.server.handle import ServerHandle
        fs = FluxFileSystem(endpoint_url={server.url!r}, token="anon", multipart="xml", part_size=5 * 2**20)
        f = fs.open("{bucket}/{key}", "wb")
        f.write(b"x" * (11 * 2**20))
        f.flush()
        deadline = time.monotonic() + 60
        # The two whole 5 MiB parts land (the last MiB stays in the buffer).
        while [u["parts"] for u in ServerHandle({server.url!r}).multipart_uploads("{bucket}")
               if u["key"] == "{key}"] != [[1, 2]]:
            assert time.monotonic() < deadline, "the 2 parts never landed"
            time.sleep(0.01)
        os._exit(0)
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr


def test_another_clients_upload_survives_cleanup_and_completes(flux_server, bucket, fs):
    _crashed_xml_writer(flux_server, bucket, "ours.bin")
    upload_id, etag = _raw_upload(fs, bucket, "theirs.bin", b"t" * 1000)
    assert sorted(u["key"] for u in flux_server.multipart_uploads(bucket)) == ["ours.bin", "theirs.bin"]
    code, _, err = _cli(flux_server, "cleanup", f"flux://{bucket}", "--older-than", "0")
    assert code == 0, err
    assert "aborted 1 unfinished upload(s)" in err
    assert (f"left 1 unfinished upload(s) that fluxfs did not start (abort them with --abort-foreign-uploads): "
            f"{bucket}/theirs.bin") in err
    assert [u["key"] for u in flux_server.multipart_uploads(bucket)] == ["theirs.bin"]
    assert flux_server.list_names(bucket) == []  # our upload's record went with it
    assert _raw_complete(fs, bucket, "theirs.bin", upload_id, etag) == 200
    fs.invalidate_cache()
    assert fs.cat(f"{bucket}/theirs.bin") == b"t" * 1000


def test_python_api_aborts_only_fluxfs_uploads_unless_told(flux_server, bucket, fs):
    _crashed_xml_writer(flux_server, bucket, "ours.bin")
    _raw_upload(fs, bucket, "theirs.bin", b"t" * 10)
    ups = bridge.run(fs, temporaries.list_incomplete_uploads, fs, bucket)
    assert sorted((u["key"], u["fluxfs"]) for u in ups) == [("ours.bin", True), ("theirs.bin", False)]
    assert bridge.run(fs, temporaries.abort_incomplete_uploads, fs, bucket) == ["ours.bin"]
    assert [u["key"] for u in flux_server.multipart_uploads(bucket)] == ["theirs.bin"]
    report = temporaries.cleanup_report(fs, bucket)
    assert report.foreign_uploads == [f"{bucket}/theirs.bin"] and report.aborted == []
    assert [u["key"] for u in flux_server.multipart_uploads(bucket)] == ["theirs.bin"]
    code, _, err = _cli(flux_server, "cleanup", f"flux://{bucket}", "--older-than", "0", "--abort-foreign-uploads")
    assert code == 0 and "aborted 1 unfinished upload(s)" in err, err
    assert flux_server.multipart_uploads(bucket) == []


def test_a_finished_xml_write_leaves_no_record(flux_server, bucket):
    fs = make_fs(flux_server, multipart="xml", part_size=5 * 2**20)
    data = bytes(range(256)) * (6 * 2**20 // 256)
    with fs.open(f"{bucket}/big.bin", "wb") as f:
        f.write(data)
    assert flux_server.list_names(bucket) == ["big.bin"] and flux_server.multipart_uploads(bucket) == []
    assert fs.cat(f"{bucket}/big.bin") == data


# -- versioned buckets --------------------------------------------------------------------------

@pytest.fixture
def versioned(flux_server) -> str:
    name = new_bucket_name()
    fs = make_fs(flux_server)
    fs.mkdir(name)
    r = fs.call("PATCH", "b/{}", name, json={"versioning": {"enabled": True}}, json_out=True)
    assert r.get("versioning") == {"enabled": True}
    return name


def _versions(server, bucket: str, prefix: str) -> list[str]:
    url = f"{server.url}/storage/v1/b/{bucket}/o?versions=true&prefix={prefix}"
    items = json.loads(urllib.request.urlopen(url, timeout=30).read()).get("items", [])
    return sorted(f"{i['name']}#{i['generation']}" for i in items)


def test_temporaries_leave_no_noncurrent_versions(flux_server, versioned):
    b = versioned
    fs = make_fs(flux_server, multipart="compose", part_size=64 * 1024)
    data = bytes(range(256)) * 1024
    with fs.open(f"{b}/composed.bin", "wb") as f:
        f.write(data)
    with fs.open(f"{b}/composed.bin", "ab") as f:
        f.write(b"tail")
    flux_server.generate(b, 40, size=100, prefix="s/")
    infos = [i for batch in fs.iter_objects(f"{b}/s") for i in batch]
    flux_server.reset_stats()
    assert len(fs.cat_objects(infos)) == 40 and flux_server.stats()["requests"].get("compose", 0) > 0
    fs.invalidate_cache()
    assert fs.cat(f"{b}/composed.bin") == data + b"tail"
    assert _versions(flux_server, b, tempnames.TEMP_PREFIX) == []


def test_cleanup_removes_noncurrent_temporaries_only(flux_server, versioned):
    b = versioned
    fs = make_fs(flux_server)
    marked = f"{b}/{tempnames.temp_key('1-host-1-dead', 'compose')}"
    fs.pipe_file(marked, b"left", metadata=tempnames.marker("1-host-1-dead"))
    forged = f"{b}/{tempnames.temp_key('1-host-1-dead', 'append')}"
    fs.pipe_file(forged, b"a user's")
    fs.pipe_file(f"{b}/keep", b"one")
    fs.pipe_file(f"{b}/keep", b"two")
    for p in (marked, forged):
        fs.call("DELETE", "b/{}/o/{}", b, p.split("/", 1)[1])  # now noncurrent versions
    before = _versions(flux_server, b, "")
    report = temporaries.cleanup_report(fs, b)
    assert report.removed == 1 and report.not_ours == [forged]
    left = _versions(flux_server, b, "")
    assert [v for v in before if v not in left] == [v for v in before if v.startswith(marked.split("/", 1)[1])]
    assert len([v for v in left if v.startswith("keep#")]) == 2
    assert any(v.startswith(forged.split("/", 1)[1]) for v in left)


# -- listings hide only what fluxfs marked -------------------------------------------------------

def test_unmarked_object_named_like_a_temporary_is_listed(flux_server, bucket, fs, tmp_path):
    forged = f"{bucket}/{tempnames.temp_key('1-host-1-x', 'append')}"
    fs.pipe_file(forged, b"mine")
    marked = f"{bucket}/{tempnames.temp_key('1-host-1-x', 'append')}"
    fs.pipe_file(marked, b"fluxfs's", metadata=tempnames.marker("1-host-1-x"))
    fs.pipe_file(f"{bucket}/a.txt", b"a")
    fresh = make_fs(flux_server)
    assert fresh.find(bucket) == sorted([f"{bucket}/a.txt", forged])
    assert fresh.du(bucket) == 5
    code, out, err = _cli(flux_server, "ls", "-r", f"flux://{bucket}")
    assert code == 0, err
    assert forged.split("/", 1)[1] in out and marked.split("/", 1)[1] not in out
    code, _, err = _cli(flux_server, "cp", "-r", f"flux://{bucket}/", str(tmp_path / "copy"))
    assert code == 0, err
    got = sorted(str(p.relative_to(tmp_path / "copy")) for p in (tmp_path / "copy").rglob("*") if p.is_file())
    assert got == sorted(["a.txt", forged.split("/", 1)[1]])


def test_cleanup_of_a_prefix_keeps_the_records_of_uploads_outside_it(flux_server, bucket, fs):
    _crashed_xml_writer(flux_server, bucket, "other/ours.bin")
    assert temporaries.cleanup_report(fs, f"{bucket}/ckpt/", older_than=0).aborted == []
    assert [u["key"] for u in flux_server.multipart_uploads(bucket)] == ["other/ours.bin"]
    report = temporaries.cleanup_report(fs, bucket, older_than=0)
    assert (report.aborted, report.removed, report.foreign_uploads) == ([f"{bucket}/other/ours.bin"], 0, [])
    assert flux_server.multipart_uploads(bucket) == [] and flux_server.list_names(bucket) == []


def test_record_of_an_upload_no_longer_open_is_deleted(flux_server, bucket, fs):
    """A writer whose abort reached the server but whose record delete did not leaves a record alone."""
    from fluxfs import temp_uploads

    record = f"{bucket}/{temp_uploads.record_key(fs)}"
    fs.pipe_file(record, b"", metadata=temp_uploads.record_metadata(fs, "gone.bin", "no-such-upload"))
    user = f"{bucket}/{tempnames.temp_key('1-host-1-x', 'multipart')}"
    fs.pipe_file(user, b"mine", metadata={tempnames.MARKER_KEY: "someone-else", "fluxfs-upload-id": "u"})
    assert bridge.run(fs, temporaries.abort_incomplete_uploads, fs, bucket) == []
    assert flux_server.list_names(bucket) == [user.split("/", 1)[1]]

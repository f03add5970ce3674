"""Mode "ab": bytes appended by composing a part onto the object, pinned by generation."""
from __future__ import annotations

import threading

import fsspec
import pytest

from fluxfs.errors import PreconditionFailed
from fluxfs.writes import append_commit
from tests.conftest import make_fs
from tests.writes.util import COMPOSE_PART, PART_SIZES, payload, temp_leftovers, write_in_pieces


@pytest.mark.parametrize("multipart", ["xml", "compose", "resumable"])
def test_append_creates_then_appends(flux_server, bucket, multipart):
    fs = make_fs(flux_server, multipart=multipart)
    path = f"{bucket}/logs/run.txt"
    for line in (b"one\n", b"two\n", b"three\n"):
        with fs.open(path, "ab") as f:
            assert f.write(line) == len(line)
            assert f.tell() == len(line)
    assert fs.cat_file(path) == b"one\ntwo\nthree\n"
    assert fs.info(path)["contentType"] == "text/plain"
    assert temp_leftovers(flux_server, bucket) == []


def test_append_on_both_servers(gcs_server, any_bucket):
    fs = make_fs(gcs_server)
    path = f"{any_bucket}/a.bin"
    fs.pipe_file(path, b"head-")
    with fs.open(path, "ab") as f:
        f.write(b"tail")
    assert fs.cat_file(path) == b"head-tail"


def test_text_mode_append_through_fsspec(flux_server, bucket):
    url = f"flux://{bucket}/metrics.csv"
    opts = {"endpoint_url": flux_server.url, "token": "anon"}
    with fsspec.open(url, "w", **opts) as f:
        f.write("step,loss\n")
    with fsspec.open(url, "a", newline="", **opts) as f:
        f.write("1,0.5\n")
    with fsspec.open(url, "r", **opts) as f:
        assert f.read() == "step,loss\n1,0.5\n"


def test_large_append_goes_in_parts(flux_server, bucket):
    fs = make_fs(flux_server, multipart="compose", part_size=COMPOSE_PART)
    path = f"{bucket}/big.bin"
    head, tail = payload(1000, seed=1), payload(5 * COMPOSE_PART + 17, seed=2)
    fs.pipe_file(path, head)
    with fs.open(path, "ab") as f:
        write_in_pieces(f, tail)
    assert fs.cat_file(path) == head + tail
    assert temp_leftovers(flux_server, bucket) == []


def test_append_keeps_content_type_and_metadata(flux_server, bucket):
    fs = make_fs(flux_server)
    path = f"{bucket}/data.bin"
    fs.pipe_file(path, b"x", content_type="application/x-custom", metadata={"owner": "ana"},
                 fixed_key_metadata={"cache_control": "no-store"})
    with fs.open(path, "ab") as f:
        f.write(b"y")
    info = fs.info(path)
    assert (info["contentType"], info["metadata"], info["cacheControl"]) == (
        "application/x-custom", {"owner": "ana"}, "no-store")
    with fs.open(path, "ab", metadata={"owner": "bo"}) as f:
        f.write(b"z")
    fs.invalidate_cache()
    info = fs.info(path)
    assert (fs.cat_file(path), info["contentType"], info["metadata"]) == (b"xyz", "application/x-custom",
                                                                          {"owner": "bo"})


def test_exception_in_with_appends_nothing(flux_server, bucket):
    fs = make_fs(flux_server)
    path = f"{bucket}/log.txt"
    fs.pipe_file(path, b"kept\n")
    with pytest.raises(RuntimeError, match="boom"):
        with fs.open(path, "ab") as f:
            f.write(b"lost\n")
            raise RuntimeError("boom")
    assert fs.cat_file(path) == b"kept\n"
    assert temp_leftovers(flux_server, bucket) == []


def test_empty_append_creates_a_missing_object_only(flux_server, bucket):
    fs = make_fs(flux_server)
    path = f"{bucket}/empty.txt"
    with fs.open(path, "ab"):
        pass
    assert fs.cat_file(path) == b""
    gen = fs.info(path)["generation"]
    with fs.open(path, "ab"):
        pass
    assert fs.info(path)["generation"] == gen  # nothing written: the object is not touched
    assert temp_leftovers(flux_server, bucket) == []


def test_two_handles_open_at_once_both_land(flux_server, bucket):
    fs = make_fs(flux_server)
    path = f"{bucket}/shared.log"
    fs.pipe_file(path, b"0\n")
    a, b = fs.open(path, "ab"), fs.open(path, "ab")  # both saw the same generation
    a.write(b"a\n")
    b.write(b"b\n")
    a.close()
    b.close()  # its first compose loses the precondition; it appends after a's bytes instead
    assert fs.cat_file(path) == b"0\na\nb\n"
    assert temp_leftovers(flux_server, bucket) == []


def test_concurrent_appenders_lose_nothing(flux_server, bucket):
    path = f"{bucket}/many.log"
    writers, each = 4, 5
    errors: list = []

    def run(w: int) -> None:
        fs = make_fs(flux_server)
        try:
            for i in range(each):
                with fs.open(path, "ab") as f:
                    f.write(f"{w}-{i}\n".encode())
        except Exception as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(w,)) for w in range(writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert errors == []
    lines = make_fs(flux_server).cat_file(path).decode().splitlines()
    assert sorted(lines) == sorted(f"{w}-{i}" for w in range(writers) for i in range(each))
    for w in range(writers):  # each writer's appends in its own order
        mine = [x for x in lines if x.startswith(f"{w}-")]
        assert mine == [f"{w}-{i}" for i in range(each)]
    assert temp_leftovers(flux_server, bucket) == []


def test_lost_races_give_a_clear_error(flux_server, bucket, monkeypatch):
    monkeypatch.setattr(append_commit, "MAX_RACES", 1)
    fs = make_fs(flux_server)
    path = f"{bucket}/log.txt"
    a, b = fs.open(path, "ab"), fs.open(path, "ab")
    a.write(b"a")
    b.write(b"bb")
    a.close()
    with pytest.raises(PreconditionFailed, match=rf"{path}: appending 2 bytes failed: the object changed 1 times"
                                                 r".*nothing was appended"):
        b.close()
    assert fs.cat_file(path) == b"a"
    assert temp_leftovers(flux_server, bucket) == []


def test_lost_answer_to_the_compose_is_recognised(flux_server, bucket):
    fs = make_fs(flux_server)
    path = f"{bucket}/log.txt"
    fs.pipe_file(path, b"1")
    flux_server.configure(lose_replies=1, fail_ops=["compose"])
    with fs.open(path, "ab") as f:
        f.write(b"2")
    assert fs.cat_file(path) == b"12"  # appended once, not twice, and no error
    assert temp_leftovers(flux_server, bucket) == []


def test_component_limit_rewrites_instead(flux_server, bucket, monkeypatch):
    cap = 4
    monkeypatch.setattr(append_commit, "MAX_COMPONENTS", cap)
    flux_server.configure(max_components=cap)
    fs = make_fs(flux_server, multipart="compose", part_size=PART_SIZES["compose"])
    path = f"{bucket}/log.txt"
    expected = b""
    for i in range(2 * cap):
        line = f"line {i}\n".encode()
        with fs.open(path, "ab") as f:
            f.write(line)
        expected += line
        assert fs.info(path).get("componentCount", 1) <= cap
    assert fs.cat_file(path) == expected
    assert temp_leftovers(flux_server, bucket) == []


def test_transaction_appends_at_commit(flux_server, bucket):
    fs = make_fs(flux_server)
    path = f"{bucket}/t.log"
    fs.pipe_file(path, b"a")
    with fs.transaction:
        with fs.open(path, "ab") as f:
            f.write(b"b")
        assert fs.cat_file(path) == b"a"
    assert fs.cat_file(path) == b"ab"

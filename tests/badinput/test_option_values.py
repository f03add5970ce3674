"""Bad-input catalogue: option values as text (`FSSPEC_FLUX_*`, the CLI's `-o`), sizes, wrong types, garbage in
info dicts, fractional offsets and gs:// URLs (docs/bad-inputs.md)."""
from __future__ import annotations

import fsspec
import pytest

from tests.conftest import make_fs


def test_compose_false_as_text_turns_compose_off(flux_server, bucket, monkeypatch):
    flux_server.generate(bucket, 10, size=100, prefix="s/")
    # What FSSPEC_FLUX_COMPOSE=False and `-o compose=False` hand the filesystem: the text "False".
    monkeypatch.setitem(fsspec.config.conf, "flux", {"compose": "False"})
    fs = fsspec.filesystem("flux", endpoint_url=flux_server.url, token="anon", skip_instance_cache=True)
    assert fs.options.compose is False
    infos = [i for batch in fs.iter_objects(f"{bucket}/s") for i in batch]
    flux_server.reset_stats()
    assert len(fs.cat_objects(infos)) == 10
    assert flux_server.stats()["requests"].get("compose", 0) == 0


@pytest.mark.parametrize("given,field,value", [
    ({"part_size": "8MiB"}, "part_size", 8 * 2**20),
    ({"part_size": "8M"}, "part_size", 8 * 2**20),
    ({"max_composite_size": "4MB"}, "max_composite_size", 4_000_000),
    ({"list_page_size": "5"}, "list_page_size", 5),
    ({"read_timeout": "2.5"}, "read_timeout", 2.5),
    ({"compose": "no"}, "compose", False),
])
def test_option_values_given_as_text_are_read_as_their_type(flux_server, given, field, value):
    assert getattr(make_fs(flux_server, **given).options, field) == value


def test_retry_fields_given_as_text_are_read_as_numbers(flux_server):
    policy = make_fs(flux_server, retry={"max_attempts": "3"}).retry_policy("read")
    assert policy.max_attempts == 3 and isinstance(policy.max_attempts, int)


@pytest.mark.parametrize("given,message", [
    ({"part_size": "8 parts"}, "part_size must be a size in bytes such as 8388608, '8MiB', '8M' or '8MB', not '8 parts'"),
    ({"read_timeout": "abc"}, "read_timeout must be a number of seconds, not 'abc'"),
    ({"list_page_size": "five"}, "list_page_size must be a whole number, not 'five'"),
    ({"read_concurrency": -1}, "read_concurrency must be at least 1, not -1"),
    ({"compose": "maybe"}, "compose must be True or False, not 'maybe'"),
    ({"retry": {"max_attempts": "three"}}, "retry: max_attempts must be a whole number, not 'three'"),
    ({"retry": {"deadline": 0}}, "retry: deadline must be positive, not 0"),
])
def test_wrong_option_values_are_refused_at_construction_naming_the_option(flux_server, given, message):
    with pytest.raises(ValueError) as info:
        make_fs(flux_server, **given)
    assert str(info.value) == message


@pytest.mark.parametrize("field,garbage,message", [
    ("crc32c", "garbage!", "object info for {p}: 'crc32c' must be GCS's base64 text of 4 bytes (like 'yZRlqg=='), "
                           "not 'garbage!'"),
    ("size", "big", "object info for {p}: 'size' must be a whole number of bytes, not 'big'"),
])
def test_garbage_in_an_info_dict_names_the_object_and_field(fs, bucket, field, garbage, message):
    fs.pipe_file(f"{bucket}/a", b"hello world")
    info = {**fs.info(f"{bucket}/a"), field: garbage}
    with pytest.raises(ValueError) as exc:
        fs.cat_objects([info])
    assert str(exc.value) == message.format(p=f"{bucket}/a")


def test_a_fractional_range_offset_is_refused(fs, bucket):
    fs.pipe_file(f"{bucket}/a", b"hello world")
    with pytest.raises(TypeError) as info:
        fs.cat_file(f"{bucket}/a", start=1.5, end=4)
    assert str(info.value) == f"start must be a whole byte offset (an int) or None, not 1.5, reading {bucket}/a"


def test_gs_urls_work_with_every_method(fs, bucket):
    gs = f"gs://{bucket}"
    fs.pipe_file(f"{gs}/a", b"hello")
    with fs.open(f"{gs}/b", "wb") as f:
        f.write(b"world")
    assert fs.cat_file(f"{gs}/a") == b"hello"
    assert fs.open(f"{gs}/b").read() == b"world"
    assert fs.info(f"{gs}/a")["size"] == 5
    assert fs.exists(f"{gs}/a")
    assert fs.find(gs) == [f"{bucket}/a", f"{bucket}/b"]
    assert fs.ls(gs, detail=False) == [f"{bucket}/a", f"{bucket}/b"]
    assert [i["name"] for batch in fs.iter_objects(gs) for i in batch] == [f"{bucket}/a", f"{bucket}/b"]
    assert fs.cat([f"{gs}/a", f"{gs}/b"]) == {f"{bucket}/a": b"hello", f"{bucket}/b": b"world"}
    assert fs.cat_objects([f"{gs}/a"]) == {f"{bucket}/a": b"hello"}
    fs.rm(f"{gs}/a")
    assert fs.find(f"gcs://{bucket}") == [f"{bucket}/b"]

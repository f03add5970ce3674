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
    policy = make_fs(flux_server, retry={"max_attempts": "3"}).options.retry_policy("read")
    assert policy.max_attempts == 3 and isinstance(policy.max_attempts, int)


@pytest.mark.parametrize("given,message", [
    ({"part_size": "8 parts"}, "part_size must be a size in bytes: a whole number (8388608) or one with a unit, binary "
                               "KiB/MiB/GiB/TiB (also K/M/G/T) or decimal KB/MB/GB/TB, such as '512MiB' or '1GB'; "
                               "not '8 parts'"),
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


@pytest.mark.parametrize("given,field,value", [
    ({"write_memory": "1GB"}, "write_memory", 10**9),
    ({"write_memory": "512MiB"}, "write_memory", 512 * 2**20),
    ({"write_memory": "2GiB"}, "write_memory", 2 * 2**30),
    ({"write_memory": "1.5 GiB"}, "write_memory", 3 * 2**29),
    ({"part_size": "16 mib"}, "part_size", 16 * 2**20),
    ({"compose_max_components": "1024"}, "compose_max_components", 1024),
    ({"list_concurrency": 8.0}, "list_concurrency", 8),
])
def test_every_size_option_takes_size_text(flux_server, given, field, value):
    """write_memory was read with int(): "1GB" failed with "invalid literal for int()", naming no option."""
    got = getattr(make_fs(flux_server, **given).options, field)
    assert got == value and type(got) is int


def test_write_memory_as_text_from_the_environment(flux_server, monkeypatch):
    conf: dict = {}
    fsspec.config.set_conf_env(conf, {"FSSPEC_FLUX_WRITE_MEMORY": "1GB"})
    monkeypatch.setitem(fsspec.config.conf, "flux", conf["flux"])
    fs = fsspec.filesystem("flux", endpoint_url=flux_server.url, token="anon", skip_instance_cache=True)
    assert fs.options.write_memory == 10**9


@pytest.mark.parametrize("given,message", [
    ({"write_memory": "1 gallon"}, "write_memory must be a size in bytes: a whole number (8388608) or one with a "
                                   "unit, binary KiB/MiB/GiB/TiB (also K/M/G/T) or decimal KB/MB/GB/TB, such as "
                                   "'512MiB' or '1GB'; not '1 gallon'"),
    ({"write_memory": True}, "write_memory must be a size in bytes: a whole number"),
    ({"compose_max_components": 1.5}, "compose_max_components must be a whole number, not 1.5"),
    ({"compose_max_components": True}, "compose_max_components must be a whole number, not True"),
    ({"compose_max_components": "1.5"}, "compose_max_components must be a whole number, not '1.5'"),
    ({"write_concurrency": 2.5}, "write_concurrency must be a whole number, not 2.5"),
    ({"list_page_size": False}, "list_page_size must be a whole number, not False"),
    ({"read_timeout": True}, "read_timeout must be a number of seconds, not True"),
    ({"read_timeout": "inf"}, "read_timeout must be a finite number of seconds, not inf"),
    ({"connect_timeout": 0}, "connect_timeout must be positive, not 0.0"),
    ({"connect_timeout": "soon"}, "connect_timeout must be a number of seconds, not 'soon'"),
    ({"write_memory": float("inf")}, "write_memory must be a size in bytes: a whole number"),
    ({"max_composite_size": -1}, "max_composite_size must not be negative, not -1"),
    ({"compose_threshold": "-1"}, "compose_threshold must be a size in bytes"),
    ({"multipart": 1}, "multipart must be 'xml', 'compose' or 'resumable', not 1"),
    ({"job_id": 5}, "job_id must be 1-100 letters"),
    ({"temp_prefix": "t" * 2000 + "/"}, "temp_prefix must be at most 890 bytes (UTF-8) so that "
                                        "'<temp_prefix><kind>/<job_id>/<16 hex>' fits GCS's 1024-byte object "
                                        "name limit, not 2001 bytes ('tttt"),
    ({"temp_prefix": "bad\ud800/"}, "temp_prefix must be valid Unicode text (GCS object names are UTF-8), not "),
    ({"temp_prefix": "tmp\x7f/"}, "temp_prefix must be a key prefix ending in '/'"),
    ({"temp_prefix": ".well-known/acme-challenge/"}, "temp_prefix must not start with '.well-known/acme-challenge/'"),
])
def test_more_wrong_option_values_are_refused_naming_the_option(flux_server, given, message):
    """Integers took 1.5 or True as 1; a 2,000-character temp_prefix failed later, blaming the user's object."""
    with pytest.raises(ValueError) as info:
        make_fs(flux_server, **given)
    assert str(info.value).startswith(message), str(info.value)


def test_a_temp_prefix_at_the_limit_holds_compose_temporaries(flux_server, bucket):
    prefix = "p" * 889 + "/"
    fs = make_fs(flux_server, temp_prefix=prefix, part_size=2**18, multipart="compose", write_memory=2**20)
    body = bytes(range(256)) * 4096
    with fs.open(f"{bucket}/big", "wb") as f:
        f.write(body)
    assert fs.cat_file(f"{bucket}/big") == body


@pytest.mark.parametrize("name", ["resumable", "Resumable"])
def test_multipart_resumable_names_the_resumable_strategy(flux_server, bucket, name):
    fs = make_fs(flux_server, multipart=name, part_size=2**18)
    assert fs.options.multipart == "resumable"
    body = b"r" * (3 * 2**18 + 5)
    flux_server.reset_stats()
    with fs.open(f"{bucket}/r", "wb") as f:
        f.write(body)
    assert fs.cat_file(f"{bucket}/r") == body
    with pytest.raises(ValueError, match=r"part_size 1000 must be a multiple of 256 KiB for resumable uploads "
                                         r"\(multipart='resumable'\)"):
        make_fs(flux_server, multipart=name, part_size=1000).open(f"{bucket}/r2", "wb")


def test_multipart_off_still_means_resumable_with_a_deprecation_warning(flux_server, bucket):
    """"off", the older name of "resumable", keeps working for a while, and says which spelling to use."""
    with pytest.warns(DeprecationWarning, match=r"multipart='off' is deprecated: spell it 'resumable'"):
        fs = make_fs(flux_server, multipart="off")
    assert fs.options.multipart == "resumable"
    fs.pipe(f"{bucket}/off", b"x" * 300_000)
    assert fs.cat_file(f"{bucket}/off") == b"x" * 300_000

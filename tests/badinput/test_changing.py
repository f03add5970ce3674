"""Bad-input catalogue: objects that change (size, content) while or after being listed or read (docs/bad-inputs.md)."""
from __future__ import annotations

import json
import random

import pytest

from .conftest import assert_nothing_left


def _bytes(n: int, seed: int) -> bytes:
    return random.Random(seed).randbytes(n)


def test_object_changes_size_during_a_read(fs, flux_server, bucket):
    path = f"{bucket}/growing.bin"
    fs.pipe_file(path, _bytes(400_000, 1))
    # Small blocks, no whole-object prefetch: the rest is fetched after the overwrite below.
    f = fs.open(path, "rb", block_size=64 * 1024, whole_object_limit=0, prefetch=1)
    first = f.read(1000)
    assert first == _bytes(400_000, 1)[:1000]
    fs.pipe_file(path, _bytes(900_000, 2))
    with pytest.raises(FileNotFoundError,
                       match=rf"{path} was overwritten or deleted while open: generation \d+ is gone"):
        f.read()
    f.close()


def test_object_changes_size_after_listing(fs, flux_server, bucket):
    flux_server.generate(bucket, 64, size=(10, 2000), prefix="s/")
    infos = [i for batch in fs.iter_objects(f"{bucket}/s") for i in batch]
    fs.pipe_file(f"{bucket}/s/00000010", b"now much longer than it was listed" * 200)
    fs.pipe_file(f"{bucket}/s/00000011", b"")
    from fluxfs.errors import ObjectChanged

    got = fs.cat_objects(infos, on_error="return")  # the listed generations: the listing is one consistent view
    for name in ("00000010", "00000011"):
        err = got[f"{bucket}/s/{name}"]
        assert isinstance(err, ObjectChanged) and isinstance(err, FileNotFoundError)
        assert f"{bucket}/s/{name}#" in str(err) and "no longer exists" in str(err)
    for name, data in got.items():
        if not name.endswith(("00000010", "00000011")):
            assert data == fs.cat_file(name)
    with pytest.raises(ObjectChanged, match=rf"{bucket}/s/0000001[01]#\d+ changed while being read"):
        fs.cat_objects(infos)
    assert_nothing_left(flux_server, bucket)


def test_manifest_with_stale_sizes(fs, flux_server, bucket, tmp_path, storage_options):
    from fluxfs.pipes import FluxMapDataset

    fs.pipe({f"{bucket}/m/{i}": _bytes(100 + i, i) for i in range(8)})
    lines = [json.dumps({"name": f"{bucket}/m/{i}", "size": 100 + i}) for i in range(8)]
    lines[3] = json.dumps({"name": f"{bucket}/m/3", "size": 5})  # wrong size in the manifest
    manifest = tmp_path / "manifest.jsonl"
    manifest.write_text("\n".join(lines) + "\n")
    ds = FluxMapDataset.from_manifest(str(manifest), storage_options=storage_options)
    assert [ds[i][1] for i in range(8)] == [_bytes(100 + i, i) for i in range(8)]
    assert_nothing_left(flux_server, bucket)


def test_concurrent_appenders_outrace_an_append(fs, flux_server, bucket, monkeypatch):
    from fluxfs.errors import PreconditionFailed
    from fluxfs.writes import append_commit

    monkeypatch.setattr(append_commit, "MAX_RACES", 2)  # 16 by default: the same message after 16
    path = f"{bucket}/log.txt"
    slow = fs.open(path, "ab")
    slow.write(b"mine\n")
    real_compose = append_commit._compose

    async def others_first(*args, **kwargs):  # another writer appends before each of our commits
        await fs._pipe_file(path, (await fs._cat_file(path) if await fs._exists(path) else b"") + b"theirs\n")
        return await real_compose(*args, **kwargs)

    monkeypatch.setattr(append_commit, "_compose", others_first)
    with pytest.raises(PreconditionFailed, match=rf"HTTP 412: {path}: appending 5 bytes failed: the object changed "
                                                 r"2 times while this append was being committed "
                                                 r"\(concurrent writers\); "
                                                 r"nothing was appended, retry the append"):
        slow.close()
    assert fs.cat_file(path) == b"theirs\ntheirs\n"  # theirs kept, ours not half-applied
    assert_nothing_left(flux_server, bucket)


def test_exception_inside_an_append(fs, flux_server, bucket):
    path = f"{bucket}/log.txt"
    fs.pipe_file(path, b"kept\n")
    with pytest.raises(KeyError):
        with fs.open(path, "ab") as f:
            f.write(b"half a line")
            raise KeyError("x")
    assert fs.cat_file(path) == b"kept\n"
    assert_nothing_left(flux_server, bucket)

"""Cache fills written with O_DIRECT (`fluxfs/cache/direct.py`): range fills and packs round-trip exact bytes,
sizes that are not a multiple of the block included (the padded tail cut off), and a filesystem refusing
O_DIRECT (ramfs; tmpfs too before Linux 6.6) gets the same entries through buffered writes. On the embedded server."""
from __future__ import annotations

import contextlib
import fcntl
import os
import random
import subprocess

import pytest

from fluxfs.cache import direct, objects as cache_objects
from tests.cache.conftest import PART
from tests.cache.test_range_fill import complete
from tests.conftest import make_fs


@pytest.fixture
def writes(monkeypatch):
    """The O_DIRECT writes the fills make: (fd opened with O_DIRECT, bytes handed over) for each."""
    seen: list[tuple[bool, int]] = []
    real = direct.write

    def spy(fd, pieces, offset):
        n = real(fd, pieces, offset)
        seen.append((bool(fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_DIRECT), n))
        return n
    monkeypatch.setattr(direct, "write", spy)
    return seen


@contextlib.contextmanager
def mounted_ramfs(directory):
    """A ramfs (which refuses O_DIRECT) mounted on `directory` (needs root); skipped where mount is not allowed."""
    if subprocess.run(["mount", "-t", "ramfs", "ramfs", str(directory)], capture_output=True).returncode:
        pytest.skip("cannot mount a ramfs here (needs root)")
    try:
        yield directory
    finally:
        subprocess.run(["umount", "-l", str(directory)], check=False)


def needs_direct(directory) -> None:
    probe = os.path.join(directory, "probe")
    open(probe, "wb").close()
    fd = direct.open_direct(probe)
    os.unlink(probe)
    if fd is None:
        pytest.skip(f"{directory} refuses O_DIRECT")
    os.close(fd)


def test_direct_write_round_trips_a_size_off_the_block(tmp_path):
    needs_direct(tmp_path)
    data = random.Random(1).randbytes(direct.BUFFER + 3 * 4096 + 123)  # more than one buffer, a short tail
    path = str(tmp_path / "f")
    open(path, "wb").close()
    fd = direct.open_direct(path)
    try:
        assert direct.write(fd, [data[:5000], data[5000:]], 0) == len(data)
        with pytest.raises(ValueError, match="multiple of 4096, not 100"):
            direct.write(fd, [b"x"], 100)
    finally:
        os.close(fd)
    assert os.path.getsize(path) == -(-len(data) // 4096) * 4096  # padded: the caller truncates
    os.truncate(path, len(data))
    assert open(path, "rb").read() == data


def fill_and_read(fs, bucket, cache_dir, n: int) -> bytes:
    path = f"{bucket}/obj"
    data = os.urandom(n)
    fs.pipe_file(path, data)
    gen = fs.info(path)["generation"]
    spans = [(0, 10), (PART - 5, n)]
    assert fs.read_ranges(path, spans, generation=gen) == [data[s:e] for s, e in spans]
    assert complete(cache_dir, "obj")
    return data


def test_a_range_fill_written_with_o_direct_holds_the_exact_bytes(flux_server, bucket, tmp_path, part_size,
                                                                   writes):
    cache_dir = tmp_path / "c"
    fs = make_fs(flux_server, cache_dir=str(cache_dir))
    needs_direct(cache_dir)
    n = 3 * PART + 1234  # the last part not a multiple of 4096
    data = fill_and_read(fs, bucket, cache_dir, n)
    assert sorted(writes) == [(True, 1234)] + [(True, PART)] * 3  # parts land in the order their GETs answer
    (entry,) = [p for p in cache_dir.iterdir() if p.suffix == ".data"]
    assert entry.read_bytes() == data  # truncated to the object's size
    flux_server.reset_stats()
    assert fs.read_ranges(f"{bucket}/obj", [(0, n)], generation=fs.info(f"{bucket}/obj")["generation"]) == [data]
    assert flux_server.stats()["data_reads"] == 0


def test_packs_written_with_o_direct_hold_the_exact_bytes(flux_server, bucket, tmp_path, writes):
    cache_dir = tmp_path / "c"
    fs = make_fs(flux_server, cache_dir=str(cache_dir))
    needs_direct(cache_dir)
    blobs = {f"{bucket}/p/{i}": random.Random(i).randbytes(1000 + 777 * i) for i in range(9)}
    fs.pipe(blobs)
    infos = list(fs.find(f"{bucket}/p/", detail=True).values())
    assert fs.cat_objects(infos) == blobs
    cache_objects.flush()
    total = sum(map(len, blobs.values()))
    assert writes == [(True, total // direct.BLOCK * direct.BLOCK)]  # the partial last block: page cache
    more = {f"{bucket}/q/{i}": random.Random(-i).randbytes(5000 + 999 * i) for i in range(5)}
    fs.pipe(more)  # the next call's claims follow in the same pack, from an offset inside a block
    assert fs.cat_objects(list(fs.find(f"{bucket}/q/", detail=True).values())) == more
    cache_objects.flush()
    end = total + sum(map(len, more.values()))
    assert writes[1:] == [(True, end // direct.BLOCK * direct.BLOCK - -(-total // direct.BLOCK) * direct.BLOCK)]
    (pack,) = [p for p in cache_dir.iterdir() if p.suffix == ".pack"]
    assert pack.stat().st_size == end
    flux_server.reset_stats()
    assert fs.cat_objects(infos + list(fs.find(f"{bucket}/q/", detail=True).values())) == {**blobs, **more}
    assert flux_server.stats()["data_reads"] == 0


def test_a_filesystem_refusing_o_direct_gets_buffered_fills(flux_server, bucket, tmp_path, part_size, writes):
    disk = tmp_path / "disk"
    disk.mkdir()
    with mounted_ramfs(disk):
        probe = disk / "probe"
        probe.write_bytes(b"")
        assert direct.open_direct(str(probe)) is None  # EINVAL
        cache_dir = disk / "c"
        fs = make_fs(flux_server, cache_dir=str(cache_dir))
        data = fill_and_read(fs, bucket, cache_dir, 2 * PART + 99)
        (entry,) = [p for p in cache_dir.iterdir() if p.suffix == ".data"]
        assert entry.read_bytes() == data
        blobs = {f"{bucket}/p/{i}": random.Random(i).randbytes(1000 + 777 * i) for i in range(5)}
        fs.pipe(blobs)
        infos = list(fs.find(f"{bucket}/p/", detail=True).values())
        assert fs.cat_objects(infos) == blobs
        cache_objects.flush()
        (pack,) = [p for p in cache_dir.iterdir() if p.suffix == ".pack"]
        assert pack.stat().st_size == sum(map(len, blobs.values()))
        flux_server.reset_stats()
        assert fs.cat_objects(infos) == blobs and fs.cat_file(f"{bucket}/obj") == data
        assert flux_server.stats()["data_reads"] == 0
        assert writes == []  # no O_DIRECT write was tried

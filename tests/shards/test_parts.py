"""`fluxfs shard --part i/N`: a packing split among processes, every object exactly once, merged into one manifest."""
from __future__ import annotations

import collections
import contextlib
import io
import json
import os
import queue
import re
import subprocess
import sys
import tarfile
import threading
import warnings
from pathlib import Path

import pytest

from fluxfs.cli import main
from fluxfs.pipes.shards import FluxShardDataset, SourceChangedError
from fluxfs.pipes.shards.samples import split_key
from fluxfs.pipes.shards.catalog import IncompletePackWarning
from fluxfs.pipes.shards.pack import member_name
from fluxfs.pipes.shards.packing import pack_prefix
from fluxfs.pipes.shards.parts import parse_part
from tests.conftest import make_fs


def _run(server, *argv: str) -> tuple[int, str]:
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = main(["--endpoint", server.url, *argv])
    return code, err.getvalue()


def _source(fs, bucket: str, n: int = 40) -> dict[str, bytes]:
    """Samples of one to three members, in two class directories, sizes uneven."""
    objs = {}
    for i in range(n):
        cls = "cats" if i % 3 else "dogs"
        objs[f"src/{cls}/{i:03d}.jpg"] = bytes([i]) * (300 + 97 * i)
        if i % 4 == 0:
            objs[f"src/{cls}/{i:03d}.txt"] = f"caption {i}".encode()
        if i % 5 == 0:
            objs[f"src/{cls}/{i:03d}.seg.png"] = bytes([255 - i]) * 700
    fs.pipe({f"{bucket}/{k}": v for k, v in objs.items()})
    return objs


def _expected_members(objs: dict[str, bytes]) -> collections.Counter:
    """(member name, bytes) of every member the packing must write: each object, and one .cls per sample."""
    want = collections.Counter((k[len("src/"):], v) for k, v in objs.items())
    for key in {split_key(k[len("src/"):])[0] for k in objs}:
        want[(key + ".cls", b"0" if key.startswith("cats") else b"1")] += 1
    return want


def _read_all(fs, bucket: str, prefix: str) -> tuple[collections.Counter, dict[str, set[str]]]:
    """Every member of every shard under `prefix`, and the shards each sample key appears in."""
    got: collections.Counter = collections.Counter()
    where: dict[str, set[str]] = collections.defaultdict(set)
    for path in sorted(p for p in fs.find(f"{bucket}/{prefix}") if p.endswith(".tar")):
        with tarfile.open(fileobj=io.BytesIO(fs.cat(path))) as tar:
            for m in tar.getmembers():
                got[(m.name, tar.extractfile(m).read())] += 1
                where[split_key(m.name)[0]].add(path)
    return got, where


def _cli_part(server, bucket: str, i: int, n: int, *extra: str) -> subprocess.Popen:
    argv = [sys.executable, "-m", "fluxfs.cli", "--endpoint", server.url, "shard", f"flux://{bucket}/src/",
            f"flux://{bucket}/out/shard-{{:04d}}.tar", "--max-size", "8KB", "--part", f"{i}/{n}", *extra]
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.mark.parametrize("parts", [3])
def test_parts_in_separate_processes_pack_every_object_exactly_once(flux_server, bucket, parts):
    fs = make_fs(flux_server)
    objs = _source(fs, bucket)
    procs = [_cli_part(flux_server, bucket, i, parts) for i in range(parts)]
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0] * parts, outs
    got, where = _read_all(fs, bucket, "out/")
    assert got == _expected_members(objs)
    assert all(len(shards) == 1 for shards in where.values())   # no sample split across shards or parts
    fs.invalidate_cache()
    tars = sorted(p for p in fs.find(f"{bucket}/out/") if p.endswith(".tar"))
    assert {p.rsplit("/", 2)[1] for p in tars} == {f"part-{i:04d}-of-{parts:04d}" for i in range(parts)}
    assert fs.cat(f"{bucket}/out/classes.txt") == b"cats\ndogs\n"
    merged = fs.cat(f"{bucket}/out/shards.jsonl").decode().splitlines()
    assert sorted(json.loads(line)["name"] for line in merged) == tars
    so = {"endpoint_url": flux_server.url, "token": "anon", "skip_instance_cache": True}
    for ds in (FluxShardDataset.from_manifest(f"flux://{bucket}/out/shards.jsonl", storage_options=so),
               FluxShardDataset.from_prefix(f"flux://{bucket}/out/", storage_options=so)):
        keys = [s["__key__"] for s in ds]
        assert sorted(keys) == sorted({split_key(k[len("src/"):])[0] for k in objs})


def test_rerun_of_one_part_resumes_and_merge_names_missing_parts(flux_server, bucket):
    fs = make_fs(flux_server)
    objs = _source(fs, bucket)
    argv = ["shard", f"flux://{bucket}/src/", f"flux://{bucket}/out/shard-{{:04d}}.tar", "--max-size", "8KB"]
    for i in (0, 2):
        code, err = _run(flux_server, *argv, "--part", f"{i}/3")
        assert code == 0, err
    assert not fs.exists(f"{bucket}/out/shards.jsonl")
    so = {"endpoint_url": flux_server.url, "token": "anon", "skip_instance_cache": True}
    with pytest.warns(IncompletePackWarning, match=f"flux://{bucket}/out/ holds a packing in parts that is not "):
        FluxShardDataset.from_prefix(f"flux://{bucket}/out/", storage_options=so)
    code, err = _run(flux_server, "shard", "--merge", f"flux://{bucket}/out/shard-{{:04d}}.tar")
    assert code == 3 and "1 of 3 parts are not complete (part 1/3" in err and "part-0001-of-0003.jsonl" in err
    part2 = sorted(p for p in fs.find(f"{bucket}/out/part-0002-of-0003/") if p.endswith(".tar"))
    gens = {p: fs.info(p)["generation"] for p in part2}
    fs.rm(part2[-1])   # interrupted before its last shard
    code, err = _run(flux_server, *argv, "--part", "2/3")
    assert code == 0 and f"{len(part2) - 1} shard(s) were already complete" in err
    fs.invalidate_cache()
    assert {p: fs.info(p)["generation"] for p in part2[:-1]} == {p: gens[p] for p in part2[:-1]}
    code, err = _run(flux_server, *argv, "--part", "1/3")
    assert code == 0 and "every part is complete" in err and "shards.jsonl" in err
    got, _ = _read_all(fs, bucket, "out/")
    assert got == _expected_members(objs)
    with warnings.catch_warnings():
        warnings.simplefilter("error", IncompletePackWarning)
        FluxShardDataset.from_prefix(f"flux://{bucket}/out/", storage_options=so)
    # Another split of the same destination is refused, naming the partition file.
    code, err = _run(flux_server, *argv, "--part", "0/2")
    assert code == 1 and "fluxfs-pack-parts.json" in err and "split into 3 parts, not 2" in err


@pytest.mark.parametrize("text", ["3/2", "a/b", "0/0", "2/2", "-1/2", "1", "auto"])
def test_bad_part_is_refused_naming_it(flux_server, bucket, text, monkeypatch):
    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    fs = make_fs(flux_server)
    fs.pipe(f"{bucket}/src/a.jpg", b"x")
    code, err = _run(flux_server, "shard", f"flux://{bucket}/src/", f"flux://{bucket}/out/{{:04d}}.tar",
                     f"--part={text}")
    assert code == 2 and "--part" in err and (text in err or "RANK" in err)
    assert not fs.exists(f"{bucket}/out")
    code, err = _run(flux_server, "shard", "--merge", f"flux://{bucket}/out/", "--part", "0/2")
    assert code == 2 and "--part" in err and "--merge" in err
    with pytest.raises(ValueError, match="part"):
        pack_prefix(f"flux://{bucket}/src/", f"flux://{bucket}/out/{{:04d}}.tar", part=(3, 2), fs=fs)


def test_part_auto_reads_torchrun_variables():
    assert parse_part("auto", {"RANK": "1", "WORLD_SIZE": "4"}) == (1, 4)
    with pytest.raises(ValueError, match="JOB_COMPLETION_INDEX"):
        parse_part("auto", {})


def test_torchrun_part_auto(flux_server, bucket):
    pytest.importorskip("torch")
    fs = make_fs(flux_server)
    objs = _source(fs, bucket, n=12)
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    argv = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node=2", "--standalone", "-m",
            "fluxfs.cli", "--endpoint", flux_server.url, "shard", f"flux://{bucket}/src/",
            f"flux://{bucket}/out/shard-{{:04d}}.tar", "--max-size", "4KB", "--part", "auto"]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    got, _ = _read_all(fs, bucket, "out/")
    assert got == _expected_members(objs)
    assert fs.exists(f"{bucket}/out/part-0001-of-0002.jsonl") and fs.exists(f"{bucket}/out/shards.jsonl")


DASK_MARKER = "<!-- scaling-dask"


def _docs_dask_example() -> str:
    """The Python block after DASK_MARKER in docs/scaling.md, as users paste it."""
    text = (Path(__file__).resolve().parents[2] / "docs" / "scaling.md").read_text(encoding="utf-8")
    assert DASK_MARKER in text, "docs/scaling.md lost its Dask example's marker"
    m = re.search(r"```python\n(.*?)```", text[text.index(DASK_MARKER):], re.S)
    assert m, "no python block after the Dask example's marker"
    return m.group(1)


def test_the_dask_example_of_docs_scaling_md_runs_as_written(flux_server, bucket, tmp_path):
    """docs/scaling.md's Dask block, run as a script on a local Dask cluster of worker processes: every object
    packed exactly once across the parts, each part below its own directory, one merged manifest."""
    pytest.importorskip("dask.distributed")
    fs = make_fs(flux_server)
    objs = _source(fs, bucket, n=16)
    code = _docs_dask_example()
    for old, new in (("flux://bucket/images/", f"flux://{bucket}/src/"), ("flux://bucket/train/", f"flux://{bucket}/out/"),
                     ('"bucket/train"', f'"{bucket}/out"')):
        assert code.count(old) == 1, old   # the test runs the block with only the bucket's names changed
        code = code.replace(old, new)
    n = int(re.search(r"^SRC, DST, N = .*, (\d+)$", code, re.M).group(1))
    (tmp_path / "pack.py").write_text(code, encoding="utf-8")
    env = dict(os.environ, STORAGE_EMULATOR_HOST=flux_server.url, FSSPEC_FLUX_TOKEN="anon", NO_GCE_CHECK="true",
               DASK_TEMPORARY_DIRECTORY=str(tmp_path))   # the workers' scratch space, removed with tmp_path
    proc = subprocess.run([sys.executable, "pack.py"], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    got, where = _read_all(fs, bucket, "out/")
    assert got == _expected_members(objs)                        # every object exactly once, across the parts
    assert all(len(shards) == 1 for shards in where.values())   # no sample split across shards or parts
    fs.invalidate_cache()
    tars = sorted(p for p in fs.find(f"{bucket}/out/") if p.endswith(".tar"))
    assert len(tars) == len(set(tars)) and {p.rsplit("/", 2)[1] for p in tars} <= {
        f"part-{i:04d}-of-{n:04d}" for i in range(n)}
    assert sorted(p for p in fs.find(f"{bucket}/out/") if p.endswith(".jsonl")) == sorted(
        [f"{bucket}/out/part-{i:04d}-of-{n:04d}.jsonl" for i in range(n)] + [f"{bucket}/out/shards.jsonl"])
    merged = fs.cat(f"{bucket}/out/shards.jsonl").decode().splitlines()
    assert sorted(json.loads(line)["name"] for line in merged) == tars   # one manifest naming every shard once
    assert proc.stdout.splitlines() == [f"{len(tars)} shards written by {n} parts", f"{bucket}/out/shards.jsonl"]


def test_object_without_extension_colliding_with_a_bin_object_is_refused(flux_server, bucket):
    """`d/x` is packed as member `d/x.bin`: beside an object `d/x.bin` that would be one sample with two bin fields."""
    fs = make_fs(flux_server)
    fs.pipe({f"{bucket}/src/d/x": b"bare", f"{bucket}/src/d/x.bin": b"named"})
    with pytest.raises(ValueError, match=r"src/d/x and .*src/d/x\.bin would both be member 'd/x\.bin'"):
        pack_prefix(f"flux://{bucket}/src/", f"flux://{bucket}/out/{{:04d}}.tar", fs=fs)
    assert not fs.exists(f"{bucket}/out")


def test_merge_refuses_a_replaced_shard_and_a_foreign_partition_file(flux_server, bucket):
    fs = make_fs(flux_server)
    _source(fs, bucket, n=12)
    argv = ["shard", f"flux://{bucket}/src/", f"flux://{bucket}/out/shard-{{:04d}}.tar", "--max-size", "4KB"]
    for i in (0, 1):
        code, err = _run(flux_server, *argv, "--part", f"{i}/2")
        assert code == 0, err
    shard = sorted(p for p in fs.find(f"{bucket}/out/part-0001-of-0002/") if p.endswith(".tar"))[0]
    fs.pipe(shard, fs.cat(shard))   # same bytes, a new generation
    fs.rm(f"{bucket}/out/shards.jsonl")
    code, err = _run(flux_server, "shard", "--merge", f"flux://{bucket}/out/")
    assert code == 3 and f"{shard} (listed in {bucket}/out/part-0001-of-0002.jsonl) is gone or was replaced" in err
    assert not fs.exists(f"{bucket}/out/shards.jsonl")
    fs.pipe(f"{bucket}/other/fluxfs-pack-parts.json", b"{not json")
    code, err = _run(flux_server, *argv[:2], f"flux://{bucket}/other/s-{{:04d}}.tar", "--part", "1/2")
    assert code == 1 and f"{bucket}/other/fluxfs-pack-parts.json is not a fluxfs packing's partition file" in err
    assert [p for p in fs.find(f"{bucket}/other/")] == [f"{bucket}/other/fluxfs-pack-parts.json"]


def test_more_parts_than_samples_through_the_python_api(flux_server, bucket):
    """`pack_prefix(part=(i, 4))` over 2 samples: two parts are empty, yet complete; the merge lists 2 shards."""
    fs = make_fs(flux_server)
    objs = {"src/cats/a.jpg": b"a" * 3000, "src/cats/a.txt": b"A", "src/dogs/b.jpg": b"b" * 100}
    fs.pipe({f"{bucket}/{k}": v for k, v in objs.items()})
    results = [pack_prefix(f"flux://{bucket}/src/", f"flux://{bucket}/out/s-{{:02d}}.tar", part=(i, 4), fs=fs)
               for i in range(4)]
    assert sorted(len(r.shards) for r in results) == [0, 0, 1, 1]
    assert [r.merged is not None for r in results] == [False, False, False, True]
    got, where = _read_all(fs, bucket, "out/")
    assert got == _expected_members(objs) and all(len(s) == 1 for s in where.values())
    assert len(fs.cat(f"{bucket}/out/shards.jsonl").decode().splitlines()) == 2
    assert sorted(len(fs.cat(f"{bucket}/out/part-{i:04d}-of-0004.jsonl")) > 0 for i in range(4)) == [0, 0, 1, 1]


def test_plain_pack_under_torchrun_says_it_packs_everything(flux_server, bucket, monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")
    fs = make_fs(flux_server)
    fs.pipe(f"{bucket}/src/a.jpg", b"x")
    code, err = _run(flux_server, "shard", f"flux://{bucket}/src/", f"flux://{bucket}/out/{{:04d}}.tar")
    assert code == 0 and "WORLD_SIZE=2 is set but --part is not: this process packs everything" in err
    assert fs.exists(f"{bucket}/out/0000.tar")


def test_a_part_rerun_that_fails_leaves_the_packing_incomplete(flux_server, bucket):
    """A part that starts writing again withdraws its manifest and the merged one: a merge meanwhile names it."""
    fs = make_fs(flux_server)
    objs = _source(fs, bucket, n=12)
    argv = ["shard", f"flux://{bucket}/src/", f"flux://{bucket}/out/shard-{{:04d}}.tar", "--max-size", "4KB"]
    for i in (0, 1):
        assert _run(flux_server, *argv, "--part", f"{i}/2")[0] == 0
    assert fs.exists(f"{bucket}/out/shards.jsonl")
    fs.rm(sorted(p for p in fs.find(f"{bucket}/out/part-0001-of-0002/") if p.endswith(".tar"))[-1])
    flux_server.configure(deny_ops={"write"})
    try:
        code, err = _run(flux_server, *argv, "--part", "1/2")
    finally:
        flux_server.configure(deny_ops=set())
    assert code == 4, err
    fs.invalidate_cache()
    assert not fs.exists(f"{bucket}/out/part-0001-of-0002.jsonl") and not fs.exists(f"{bucket}/out/shards.jsonl")
    code, err = _run(flux_server, "shard", "--merge", f"flux://{bucket}/out/")
    assert code == 3 and "1 of 2 parts are not complete (part 1/2" in err
    code, err = _run(flux_server, *argv, "--part", "1/2")
    assert code == 0 and "every part is complete" in err
    assert _read_all(fs, bucket, "out/")[0] == _expected_members(objs)


def _tar_keys(fs, paths: list[str]) -> list[str]:
    """Sample keys of the shards `paths`, in order (a sample's members are consecutive)."""
    keys: list[str] = []
    for path in paths:
        with tarfile.open(fileobj=io.BytesIO(fs.cat(path))) as tar:
            for m in tar.getmembers():
                key = split_key(m.name)[0]
                if not keys or keys[-1] != key:
                    keys.append(key)
    return keys


def test_a_source_changed_between_parts_is_refused_naming_the_keys(flux_server, bucket):
    """Part 1 runs after objects of its share were replaced or deleted (and one added): it refuses, naming them,
    and writes nothing; the listing part 0 pinned is never mixed with the new one."""
    fs = make_fs(flux_server)
    _source(fs, bucket, n=24)
    argv = ["shard", f"flux://{bucket}/src/", f"flux://{bucket}/out/shard-{{:04d}}.tar", "--max-size", "4KB"]
    code, err = _run(flux_server, *argv, "--part", "0/2")
    assert code == 0, err
    done = set(_tar_keys(fs, sorted(p for p in fs.find(f"{bucket}/out/part-0000-of-0002/") if p.endswith(".tar"))))
    every = {split_key(member_name(p[len(f"{bucket}/src/"):]))[0] for p in fs.find(f"{bucket}/src/")}
    theirs = sorted(every - done)   # part 1's samples
    assert theirs and done
    replaced, deleted = f"src/{theirs[0]}.jpg", f"src/{theirs[-1]}.jpg"
    fs.pipe(f"{bucket}/{replaced}", b"new bytes")
    fs.rm(f"{bucket}/{deleted}")
    fs.pipe(f"{bucket}/src/cats/999.jpg", b"added")
    code, err = _run(flux_server, *argv, "--part", "1/2", "--seed", "3")   # another order: refused first
    assert code == 1 and "orders samples shuffled with seed 0, not shuffled with seed 3" in err, err
    code, err = _run(flux_server, *argv, "--part", "1/2")
    assert code == 1 and "SourceChangedError" in err and "fluxfs-pack-parts.json" in err, err
    assert f"replaced: {replaced[4:]}" in err and f"deleted: {deleted[4:]}" in err and "nothing was written" in err
    fs.invalidate_cache()
    assert not fs.exists(f"{bucket}/out/part-0001-of-0002") and not fs.exists(f"{bucket}/out/part-0001-of-0002.jsonl")
    assert not fs.exists(f"{bucket}/out/shards.jsonl")
    # The same error from Python, with the keys.
    with pytest.raises(SourceChangedError) as got:
        pack_prefix(f"flux://{bucket}/src/", f"flux://{bucket}/out/shard-{{:04d}}.tar", part=(1, 2), max_size=4000,
                    fs=fs)
    assert sorted(got.value.keys) == sorted([f"{bucket}/{replaced}", f"{bucket}/{deleted}"])


def test_parts_of_an_unchanged_source_pack_what_one_run_packs(flux_server, bucket):
    """Three parts, one after the other: the same samples in the same order as one packing, the same members."""
    fs = make_fs(flux_server)
    objs = _source(fs, bucket, n=30)
    one = pack_prefix(f"flux://{bucket}/src/", f"flux://{bucket}/one/s-{{:04d}}.tar", max_size=6000, fs=fs)
    parts = [pack_prefix(f"flux://{bucket}/src/", f"flux://{bucket}/three/s-{{:04d}}.tar", part=(i, 3),
                         max_size=6000, fs=fs) for i in range(3)]
    assert all(r.samples > 0 for r in parts) and sum(r.samples for r in parts) == one.samples
    merged = [json.loads(line)["name"] for line in fs.cat(f"{bucket}/three/shards.jsonl").decode().splitlines()]
    assert _tar_keys(fs, merged) == _tar_keys(fs, [u.split("://")[1] for u in one.shards])
    assert _read_all(fs, bucket, "three/")[0] == _read_all(fs, bucket, "one/")[0] == _expected_members(objs)


def test_a_part_waiting_for_part_0_says_what_it_waits_for(flux_server, bucket, capfd):
    fs = make_fs(flux_server)
    _source(fs, bucket, n=6)
    said: list[str] = []
    pack_prefix(f"flux://{bucket}/src/", f"flux://{bucket}/py/s-{{:04d}}.tar", part=(1, 2), fs=fs, plan_wait=0.3,
                on_wait=said.append)   # part 0 never comes: after the wait, part 1 plans itself
    assert said == [f"part 1/2: waiting up to 0.3 s for part 0 to pin the source's listing in "
                    f"{bucket}/py/fluxfs-pack-parts.json"]
    assert capfd.readouterr() == ("", "")   # a library call prints nothing
    # The command says so on stderr while it waits, and packs once part 0 has pinned the listing.
    proc = _cli_part(flux_server, bucket, 1, 2)
    try:
        lines: queue.Queue = queue.Queue()
        threading.Thread(target=lambda: [lines.put(line) for line in proc.stderr], daemon=True).start()
        line = ""
        while "waiting" not in line:   # lines before it (an import's warning) are not this test's business
            line = lines.get(timeout=60)
        assert line.startswith(f"fluxfs shard: part 1/2: waiting up to 120 s for part 0 to pin the source's "
                               f"listing in {bucket}/out/fluxfs-pack-parts.json"), line
        code, err = _run(flux_server, "shard", f"flux://{bucket}/src/", f"flux://{bucket}/out/shard-{{:04d}}.tar",
                         "--max-size", "8KB", "--part", "0/2")
        assert code == 0, err
        assert proc.wait(timeout=120) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    fs.invalidate_cache()
    assert fs.exists(f"{bucket}/out/shards.jsonl")


# Stems that are prefixes of other keys, followed by characters below and above '.':
# "a/x" (a bare object and two fields) sorts around "a/x-2.*", "a/x.d/y.*" and "a/x_3.*".
TRICKY = ["a/x", "a/x.jpg", "a/x.cls", "a/x-2.jpg", "a/x-2.cls", "a/x.d/y.jpg", "a/x.d/y.txt", "a/x_3.jpg",
          "a/x!.jpg", "a/x!.txt", "a/w.jpg", "a/y.jpg", "a/y.z.png"]


def test_parts_pack_stems_that_prefix_other_keys_each_object_exactly_once(flux_server, bucket):
    fs = make_fs(flux_server)
    fs.pipe({f"{bucket}/s/{k}": k.encode() for k in TRICKY})
    want = collections.Counter((member_name(k), k.encode()) for k in TRICKY)
    for n in (2, 3):
        for i in range(n):
            pack_prefix(f"flux://{bucket}/s/", f"flux://{bucket}/o{n}/{{:03d}}.tar", part=(i, n), label_dirs=False,
                        max_samples=2, fs=fs)
        got, where = _read_all(fs, bucket, f"o{n}/")
        assert got == want and all(len(shards) == 1 for shards in where.values())

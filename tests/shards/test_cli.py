"""`fluxfs shard` (pack a prefix into shards, resumable) and `fluxfs shard index`, end to end."""
from __future__ import annotations

import contextlib
import io
import tarfile

import pytest

from fluxfs.cli import main
from fluxfs.pipes.shards import FluxShardMapDataset, ShardIndex
from fluxfs.pipes.shards.index import index_path
from tests.conftest import make_fs


def _run(server, *argv: str) -> tuple[int, str]:
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = main(["--endpoint", server.url, *argv])
    return code, err.getvalue()


def _objects(fs, bucket: str) -> dict[str, bytes]:
    objs = {f"img/{cls}/{i:03d}.jpg": bytes([i]) * (1000 + 500 * i) for cls in ("cats", "dogs") for i in range(6)}
    objs["img/cats/003.txt"] = b"a caption"  # a second field of sample cats/003
    fs.pipe({f"{bucket}/{k}": v for k, v in objs.items()})
    return objs


def test_pack_a_prefix_into_shards_then_resume(flux_server, bucket):
    fs = make_fs(flux_server)
    objs = _objects(fs, bucket)
    argv = ["shard", f"flux://{bucket}/img/", f"flux://{bucket}/sh/{{:03d}}.tar", "--max-size", "16KB"]
    code, err = _run(flux_server, *argv)
    assert code == 0, err
    shards = sorted(p for p in fs.find(f"{bucket}/sh/") if p.endswith(".tar"))
    assert len(shards) > 1 and f"into {len(shards)} shard(s)" in err
    assert fs.cat(f"{bucket}/sh/classes.txt") == b"cats\ndogs\n"
    so = {"endpoint_url": flux_server.url, "token": "anon", "skip_instance_cache": True}
    ds = FluxShardMapDataset.from_prefix(f"flux://{bucket}/sh/", storage_options=so)
    got = {s["__key__"]: s for s in (ds[i] for i in range(len(ds)))}
    assert len(got) == 12
    for name, data in objs.items():
        key, ext = name[len("img/"):].split(".")
        assert got[key][ext] == data
        assert got[key]["cls"] == (b"0" if key.startswith("cats") else b"1")
    assert all(ShardIndex.from_bytes(p, fs.cat(index_path(p))).size <= 16_000 for p in shards)
    gens = {p: fs.info(p)["generation"] for p in shards}
    # Interrupted after all but the last shard: the rerun writes only that one.
    fs.rm([shards[-1], index_path(shards[-1])])
    code, err = _run(flux_server, *argv)
    assert code == 0 and f"{len(shards) - 1} shard(s) were already complete" in err
    fs.invalidate_cache()
    assert {p: fs.info(p)["generation"] for p in shards[:-1]} == {p: gens[p] for p in shards[:-1]}
    assert fs.cat(shards[-1]) and fs.info(shards[-1])["generation"] != gens[shards[-1]]
    # A different packing to the same place is refused rather than overwriting.
    code, err = _run(flux_server, *argv[:-1], "8KB")
    assert code == 5 and "exists and is not this packing's shard 0" in err and "--overwrite" in err


def test_index_command_indexes_foreign_shards(flux_server, bucket, tmp_path):
    wds = pytest.importorskip("webdataset")
    fs = make_fs(flux_server)
    for n in range(2):
        path = tmp_path / f"{n}.tar"
        with wds.TarWriter(str(path)) as sink:
            for i in range(5):
                sink.write({"__key__": f"{n}-{i}", "txt": f"t{i}"})
        fs.put_file(str(path), f"{bucket}/w/{n}.tar")
    code, err = _run(flux_server, "shard", "index", f"flux://{bucket}/w/")
    assert code == 0 and "indexed 2 shard(s), 0 already up to date" in err
    assert [m.name for m in ShardIndex.from_bytes("x", fs.cat(f"{bucket}/w/1.tar.idx")).members] == \
        [f"1-{i}.txt" for i in range(5)]
    code, err = _run(flux_server, "shard", "index", f"flux://{bucket}/w/0.tar")
    assert code == 0 and "indexed 0 shard(s), 1 already up to date" in err
    code, err = _run(flux_server, "shard", "index", f"flux://{bucket}/w/0.tar", "--force")
    assert code == 0 and "indexed 1 shard(s)" in err
    code, err = _run(flux_server, "shard", "index", f"flux://{bucket}/w/none.tar")
    assert code == 3 and f"shard flux://{bucket}/w/none.tar does not exist" in err


def test_index_command_reads_non_utf8_member_names_as_tarfile_does(flux_server, bucket):
    from .crafted import data_blocks, end, header, reference

    fs = make_fs(flux_server)
    # GNU tar writes a name's bytes as they are; tarfile reads bytes that are not UTF-8 as lone surrogates.
    data = (header("k/caf\udce9.txt", 2, fmt=tarfile.GNU_FORMAT) + data_blocks(b"ok")
            + header("k/caf\udce9.cls", 1, fmt=tarfile.GNU_FORMAT) + data_blocks(b"1") + end())
    fs.pipe_file(f"{bucket}/u/0.tar", data)
    code, err = _run(flux_server, "shard", "index", f"flux://{bucket}/u/0.tar")
    assert code == 0 and "indexed 1 shard(s)" in err, err
    index = ShardIndex.from_bytes("x", fs.cat(f"{bucket}/u/0.tar.idx"))
    assert index.members == [m for m, _ in reference(data)]
    so = {"endpoint_url": flux_server.url, "token": "anon", "skip_instance_cache": True}
    ds = FluxShardMapDataset(f"flux://{bucket}/u/0.tar", storage_options=so)
    assert len(ds) == 1 and ds[0]["__key__"] == "k/caf\udce9" and ds[0]["txt"] == b"ok"


@pytest.mark.parametrize("argv, message", [
    (["flux://{b}/img/", "flux://{b}/out/shard.tar"], "needs a field for the shard number"),
    (["flux://{b}/img/", "flux://{b}/img/sh/{{}}.tar"], "lies inside the source prefix"),
    (["flux://{b}/img/", "flux://{b}/o/{{}}.tar", "--max-size", "lots"], "bad size 'lots'"),
    (["flux://{b}/img/"], "takes SRC_PREFIX DST_PATTERN"),
    (["flux://{b}/img/", "flux://{b}/o/{{}}.tar", "--seed", "3", "--no-shuffle"],
     "--seed orders a shuffled packing; --no-shuffle packs in key order: give one of them"),
])
def test_bad_pack_arguments_are_usage_errors(flux_server, bucket, argv, message):
    code, err = _run(flux_server, "shard", *[a.format(b=bucket) for a in argv])
    assert code == 2 and message in err


@pytest.mark.parametrize("src, dst", [
    ("flux://{b}/img/", "flux://{b}/out/shard.tar"),
    ("flux://{b}/img/", "flux://{b}/out/shard-{{name}}.tar"),
    ("flux://{b}/img", "flux://{b}/img/sh/{{}}.tar"),
    ("flux://{b}/img/", "flux://{b}/img/{{:04d}}.tar"),
])
def test_a_bad_destination_is_refused_alike_by_the_command_and_the_python_api(flux_server, bucket, src, dst):
    """One check (`check_destination`): `pack_prefix`'s ValueError is the command's usage error, word for word."""
    from fluxfs.pipes.shards.packing import pack_prefix

    fs = make_fs(flux_server)
    _objects(fs, bucket)
    src, dst = src.format(b=bucket), dst.format(b=bucket)
    with pytest.raises(ValueError) as refused:
        pack_prefix(src, dst, fs=fs)
    assert dst in str(refused.value)
    code, err = _run(flux_server, "shard", src, dst)
    assert code == 2 and f"fluxfs shard: {refused.value}" in err, err
    assert sorted(fs.find(bucket)) == sorted(f"{bucket}/{k}" for k in _objects(fs, bucket))


def test_pack_labels_from_a_manifest(flux_server, bucket, tmp_path):
    fs = make_fs(flux_server)
    _objects(fs, bucket)
    manifest = tmp_path / "labels.tsv"
    manifest.write_text("cats/000.jpg\t7\ndogs/005.jpg\t2\n")
    code, err = _run(flux_server, "shard", f"flux://{bucket}/img/", f"flux://{bucket}/m/{{:03d}}.tar",
                     "--manifest", str(manifest))
    assert code == 0, err
    so = {"endpoint_url": flux_server.url, "token": "anon", "skip_instance_cache": True}
    ds = FluxShardMapDataset.from_prefix(f"flux://{bucket}/m/", storage_options=so)
    assert sorted((s["__key__"], s["cls"]) for s in (ds[0], ds[1])) == [("cats/000", b"7"), ("dogs/005", b"2")]
    assert len(ds) == 2 and not fs.exists(f"{bucket}/m/classes.txt")


def test_an_object_changed_since_listing_stops_the_packing_cleanly(flux_server, bucket):
    """Replaced after the listing, with other bytes of another size or of the same size (told by crc32c), or
    deleted: a SourceChangedError naming it, the shard being written aborted, the earlier ones kept."""
    from fluxfs.pipes.shards import SourceChangedError
    from fluxfs.pipes.shards.pack import pack, plan_marker, plan_samples, plan_shards
    from tests.badinput.conftest import assert_nothing_left

    fs = make_fs(flux_server)
    _objects(fs, bucket)
    # Batched reads read the listed generation, so each change is found as that generation gone.
    why = "was overwritten or deleted since it was listed"
    for case, change in enumerate([lambda p: fs.pipe_file(p, b"different"),
                                   lambda p: fs.pipe_file(p, bytes(len(fs.cat_file(p)))),
                                   lambda p: fs.rm_file(p)]):
        fs.invalidate_cache()
        infos = sorted(fs.find(f"{bucket}/img/", detail=True).values(), key=lambda i: i["name"])
        plan = plan_shards(plan_samples(infos, f"{bucket}/img/")[0], max_size=16_000, max_samples=100)
        urls = [f"flux://{bucket}/c{case}/{n}.tar" for n in range(len(plan))]
        last = plan[-1][0].objects[0][1]["name"]
        change(last)
        with pytest.raises(SourceChangedError, match=rf"{last} .*{why}.*: nothing of {urls[-1]} was kept") as got:
            pack(fs, urls, plan, range(len(plan)), [plan_marker(s, None) for s in plan])
        assert got.value.keys == [last]
        written = sorted(p for p in fs.find(f"{bucket}/c{case}/") if p.endswith(".tar"))
        assert written == [u.split("://")[1] for u in urls[:-1]]
        assert all(fs.exists(p + ".idx") for p in written)
    assert_nothing_left(flux_server, bucket)


@pytest.mark.parametrize("text, size", [("256M", 256 * 2**20), ("256MiB", 256 * 2**20), ("256MB", 256 * 10**6),
                                        ("1000", 1000), ("1.5KB", 1500)])
def test_max_size_reads_sizes_as_every_option_does(text, size):
    """One size parser: `--max-size 256M` is what `part_size="256M"` is (2^20-based), 256MB is 10^6-based."""
    from fluxfs.cli.shards import parse_size
    from fluxfs.options import parse_size as option_size
    assert parse_size(text) == option_size("part_size", text) == size

"""Collective loads (`group=`) over real gloo ranks, and datasets listed once per job.

Each rank reads through its own embedded server; the servers share one --root, so they hold the same
objects (and generations) and what server r sent is exactly what rank r read from storage.
"""
from __future__ import annotations

import io
import tarfile

import pytest
import safetensors.torch as st
import torch

from fluxfs.server import run
from tests import _gloo as gloo
from tests._gloo import digests
from tests.conftest import make_fs

from .test_model_dir import write_dir


def model_state() -> dict:
    """~26 MB: one large tensor (cut between ranks), many medium ones, mixed dtypes, a 0-d and an empty one."""
    g = torch.Generator().manual_seed(5)
    state = {"embed.weight": torch.randn(2048, 1024, generator=g)}
    for i in range(8):
        w = torch.randn(768, 768, generator=g)
        state[f"layers.{i}.weight"] = w.to(torch.bfloat16) if i % 3 == 1 else w
        state[f"layers.{i}.bias"] = torch.randn(768, generator=g).to(torch.float16)
    state["scale"] = torch.tensor(3.5, dtype=torch.float64)
    state["empty"] = torch.zeros(0, 4)
    return state


@pytest.fixture(scope="module")
def servers(tmp_path_factory):
    """Three servers on one root holding the model (2 shards), 6 data objects, 2 tar shards and 2 more among 40
    other objects."""
    root = tmp_path_factory.mktemp("root")
    with gloo.written_root(root) as (first, fs, bucket):
        write_dir(fs, f"{bucket}/model", model_state(), 2)
        for i in range(6):
            fs.pipe_file(f"{bucket}/data/{i:03d}", bytes([i]) * 10)
        for i in range(2):
            buf = io.BytesIO()
            with tarfile.open(fileobj=buf, mode="w") as tar:
                info = tarfile.TarInfo(f"s{i}.bin")
                info.size = 3
                tar.addfile(info, io.BytesIO(b"abc"))
            fs.pipe_file(f"{bucket}/tars/shard-{i}.tar", buf.getvalue())
            fs.pipe_file(f"{bucket}/mapped/shard-{i}.tar", buf.getvalue())
        for i in range(40):
            fs.pipe_file(f"{bucket}/mapped/notes-{i:02d}.txt", b"n")
        with run(root=str(root)) as second, run(root=str(root)) as third:
            yield bucket, [first, second, third], fs


def reference(fs, bucket: str, names=None) -> dict:
    """safetensors' own load_file of the same bytes, as digests."""
    out = {}
    for path in sorted(fs.find(f"{bucket}/model")):
        if path.endswith(".safetensors") and (names is None or path.endswith(names)):
            out.update(st.load(fs.cat_file(path)))
    return digests(out)


def run_ranks(mode: str, tmp_path, bucket: str, servers) -> list[dict]:
    return gloo.run_ranks("tests.weights._group_child", tmp_path, [s.url for s in servers], mode, bucket)


@pytest.mark.parametrize("ranks, share", [(2, 0.55), (3, 0.4)])
def test_every_rank_gets_every_tensor_reading_its_share(servers, tmp_path, ranks, share):
    bucket, handles, fs = servers
    model_bytes = sum(fs.du(f"{bucket}/model", total=False).values())
    shard_bytes = fs.size(f"{bucket}/model/model-00001-of-00002.safetensors")
    got = run_ranks("load", tmp_path, bucket, handles[:ranks])
    want, want_file = reference(fs, bucket), reference(fs, bucket, "model-00001-of-00002.safetensors")
    for r, report in enumerate(got):
        assert report["model_dir"]["tensors"] == want, f"rank {r}"
        assert report["file"]["tensors"] == want_file, f"rank {r}"
        assert report["model_dir"]["bytes"] <= share * model_bytes, (r, report["model_dir"]["bytes"], model_bytes)
        assert report["file"]["bytes"] <= share * shard_bytes, (r, report["file"]["bytes"], shard_bytes)
    # Read once in all: the shares add up to the model (plus rank 0's header reads), not N copies of it.
    assert sum(r["model_dir"]["bytes"] for r in got) <= 1.05 * model_bytes


def test_rank_specific_slices_are_read_alone_shared_tensors_once(servers, tmp_path):
    bucket, handles, fs = servers
    got = run_ranks("slices", tmp_path, bucket, handles[:2])
    full = {}
    for path in sorted(fs.find(f"{bucket}/model")):
        if path.endswith(".safetensors"):
            full.update(st.load(fs.cat_file(path)))
    for r, report in enumerate(got):
        want = {k: (v[r * v.shape[0] // 2:(r + 1) * v.shape[0] // 2] if v.dim() == 2 else v) for k, v in full.items()}
        assert report["slices"]["tensors"] == digests(want), f"rank {r}"
        # Its rows only (plus the other rank's rows of bf16 weights: gaps under 1 MiB are read through).
        assert report["slices"]["bytes"] <= 0.6 * sum(v.nbytes for v in full.values())


def test_datasets_list_once_per_job(servers, tmp_path):
    bucket, handles, fs = servers
    zero, one = run_ranks("list", tmp_path, bucket, handles[:2])
    assert zero["objects"]["names"] == one["objects"]["names"] == [f"{bucket}/data/{i:03d}" for i in range(6)]
    assert zero["shards"]["names"] == one["shards"]["names"] == [f"{bucket}/tars/shard-{i}.tar" for i in range(2)]
    assert zero["objects"]["lists"] >= 1 and zero["shards"]["lists"] >= 1
    assert one["objects"]["lists"] == one["shards"]["lists"] == 0  # rank 1 made no list call
    # FluxShardMapDataset.from_prefix too: its prefix holds 40 other objects, which rank 0's listing scans and
    # rank 1 never does (its few keys scanned are gcsfs's one-key directory probes in info()).
    want = [f"flux://{bucket}/mapped/shard-{i}.tar" for i in range(2)]
    assert zero["mapped"]["names"] == one["mapped"]["names"] == want
    assert zero["mapped"]["keys"] >= 42 and one["mapped"]["keys"] < 10, (zero["mapped"], one["mapped"])
    assert zero["alone"]["lists"] >= 1 and one["alone"]["lists"] >= 1  # list_once=False: each lists
    assert zero["alone"]["names"] == one["alone"]["names"] == zero["objects"]["names"]
    assert "rank 0 was listing the dataset of prefix" in one["order"] and "same order" in one["order"]


def test_bad_group_calls_fail_on_every_rank_naming_why(servers, tmp_path):
    bucket, handles, _ = servers
    zero, one = run_ranks("errors", tmp_path, bucket, handles[:2])
    for report in (zero, one):  # no rank is left waiting in a collective: each raises
        assert report["differ"].startswith("ValueError: load_model_dir(flux://")
        assert "the ranks of the group asked for different tensors" in report["differ"]
        assert "(rank 1 differs from rank 0)" in report["differ"]
        assert report["missing"].startswith("FileNotFoundError: load_model_dir(flux://")
        assert "neither model.safetensors.index.json nor model.safetensors" in report["missing"]
    assert zero["member"] == "loaded"  # a group of one: rank 0 loads alone
    assert one["member"].startswith("ValueError: load_file(flux://") and "is not a member of the group" in one["member"]


def test_ranks_asking_for_another_model_all_raise_naming_who_asked_for_what(servers, tmp_path):
    bucket, handles, fs = servers
    got = run_ranks("asked", tmp_path, bucket, handles[:3])
    for r, report in enumerate(got):  # every rank raises (none receives rank 0's tensors, none hangs)
        assert report["url"].startswith("ValueError: load_model_dir(flux://"), (r, report["url"])
        assert (f"the URL: rank 1 asked for flux://{bucket}/other, ranks 0 and 2 for flux://{bucket}/model"
                in report["url"]), report["url"]
        assert report["file"].startswith("ValueError: load_file(flux://"), (r, report["file"])
        assert (f"rank 2 asked for flux://{bucket}/model/model-00002-of-00002.safetensors, ranks 0 and 1 for "
                f"flux://{bucket}/model/model-00001-of-00002.safetensors") in report["file"], report["file"]
        assert ("tensors=: ranks 1 and 2 asked for 1 tensor ('scale'), rank 0 for 2 tensors ('empty', 'scale')"
                in report["tensors"]), report["tensors"]
        assert "endpoint" not in report["url"]  # the three servers share one root: their endpoints may differ
        assert report["after"] == {"scale": reference(fs, bucket)["scale"]}  # the group goes on after


def test_a_rank_reading_other_storage_is_told_its_endpoint_differs(servers, tmp_path):
    bucket, handles, fs = servers
    with run() as elsewhere:  # the same bucket and names, other objects (other generations)
        other = make_fs(elsewhere)
        other.mkdir(bucket)
        write_dir(other, f"{bucket}/model", {"scale": torch.tensor(1.0)}, 1)
        zero, one = gloo.run_ranks("tests.weights._group_child", tmp_path, [handles[0].url, elsewhere.url],
                                   "endpoint", bucket)
    for report in (zero, one):
        assert report["endpoint"].startswith("ValueError: load_model_dir(flux://"), report["endpoint"]
        assert (f"rank 1 reads through endpoint {elsewhere.url.rstrip('/')}, rank 0 through "
                f"{handles[0].url.rstrip('/')}, and they do not serve the same objects") in report["endpoint"]
        assert "changed while being read" not in report["endpoint"]


def test_a_read_failing_on_one_rank_raises_on_every_rank_and_the_group_goes_on(servers, tmp_path):
    bucket, handles, fs = servers
    handles[1].configure(deny_ops={"read"})  # rank 1's server: every read of its share is refused (403)
    try:
        zero, one = run_ranks("denied", tmp_path, bucket, handles[:2])
    finally:
        handles[1].configure(deny_ops=())
    for report in (zero, one):  # neither left waiting for the other's bytes
        assert report["denied"].startswith("PermissionError: "), report["denied"]
        assert f"{bucket}/model/model-0000" in report["denied"]
        assert report["after"] == reference(fs, bucket)
    assert "(raised on rank 1 of the group)" in zero["denied"]

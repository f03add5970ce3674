"""Packing shuffles: a folder-per-class source packed with the defaults and read shuffled gives batches as mixed
as a uniform shuffle (packed in key order, each shard held one class and no read-time buffer undid it)."""
from __future__ import annotations

import collections
import contextlib
import io
import random
import statistics

from fluxfs.cli import main
from fluxfs.pipes.shards import FluxShardDataset, ShardIndex
from fluxfs.pipes.shards.index import index_path
from tests.conftest import make_fs

CLASSES, PER_CLASS, BATCH, SHARD_SAMPLES = 6, 60, 32, 40
# The read-time shuffle buffer, scaled down with the dataset: the default 256 against the issue's ~5,000 samples
# per class directory is what 16 is against these 360 (a buffer as large as the dataset would hide the packing).
BUFFER = 16


def _majority_share(labels: list, batch: int = BATCH) -> float:
    """The mean, over full batches, of the share of a batch its most frequent label takes."""
    batches = [labels[k:k + batch] for k in range(0, len(labels) - batch + 1, batch)]
    return statistics.mean(collections.Counter(b).most_common(1)[0][1] / batch for b in batches)


def _pack(server, bucket: str, dst: str, *extra: str) -> str:
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = main(["--endpoint", server.url, "shard", f"flux://{bucket}/src/", f"flux://{bucket}/{dst}/{{:04d}}.tar",
                     "--max-samples", str(SHARD_SAMPLES), *extra])
    assert code == 0, err.getvalue()
    return err.getvalue()


def _read_labels(server, bucket: str, dst: str) -> list[bytes]:
    so = {"endpoint_url": server.url, "token": "anon", "skip_instance_cache": True}
    ds = FluxShardDataset.from_prefix(f"flux://{bucket}/{dst}/", storage_options=so, shuffle=True, seed=1,
                                        shuffle_buffer=BUFFER)
    return [s["cls"] for s in ds]


def test_packed_with_defaults_and_read_shuffled_batches_mix_classes_as_a_uniform_shuffle(flux_server, bucket):
    fs = make_fs(flux_server)
    fs.pipe({f"{bucket}/src/class{c}/{i:03d}.bin": bytes([c, i]) for c in range(CLASSES) for i in range(PER_CLASS)})
    labels = [str(c).encode() for c in range(CLASSES) for _ in range(PER_CLASS)]
    uniform = statistics.mean(_majority_share(random.Random(s).sample(labels, len(labels))) for s in range(50))

    err = _pack(flux_server, bucket, "mixed")
    assert "shuffled with seed 0" in err
    got = _read_labels(flux_server, bucket, "mixed")
    assert sorted(got) == sorted(labels)
    assert _majority_share(got) <= uniform + 0.08, (_majority_share(got), uniform)
    # Each shard holds about its share of every class, and its index records how it was ordered.
    for path in sorted(p for p in fs.find(f"{bucket}/mixed/") if p.endswith(".tar")):
        packed = ShardIndex.from_bytes(path, fs.cat_file(index_path(path))).extra["packed"]
        assert (packed["order"], packed["seed"]) == ("shuffled", 0)

    _pack(flux_server, bucket, "sorted", "--no-shuffle")
    got = _read_labels(flux_server, bucket, "sorted")
    assert sorted(got) == sorted(labels)
    assert _majority_share(got) >= uniform + 0.25, (_majority_share(got), uniform)


def test_the_packing_order_is_the_seed_s_and_a_rerun_resumes(flux_server, bucket):
    fs = make_fs(flux_server)
    fs.pipe({f"{bucket}/src/c{c}/{i:02d}.bin": bytes([c, i]) for c in range(3) for i in range(20)})

    def order(dst: str) -> list[str]:
        keys = []
        for path in sorted(p for p in fs.find(f"{bucket}/{dst}/") if p.endswith(".tar")):
            keys += [m.name for m in ShardIndex.from_bytes(path, fs.cat_file(index_path(path))).members]
        return keys

    _pack(flux_server, bucket, "a")
    _pack(flux_server, bucket, "b", "--seed", "0")
    _pack(flux_server, bucket, "c", "--seed", "7")
    assert order("a") == order("b") != order("c") and sorted(order("a")) == sorted(order("c"))
    gens = {p: fs.info(p)["generation"] for p in fs.find(f"{bucket}/c/") if p.endswith(".tar")}
    err = _pack(flux_server, bucket, "c", "--seed", "7")   # the same command again: nothing to do
    assert f"{len(gens)} shard(s) were already complete" in err
    fs.invalidate_cache()
    assert {p: fs.info(p)["generation"] for p in gens} == gens
    err = io.StringIO()
    with contextlib.redirect_stderr(err):   # another order onto those shards: refused, not mixed
        code = main(["--endpoint", flux_server.url, "shard", f"flux://{bucket}/src/", f"flux://{bucket}/c/{{:04d}}.tar",
                     "--max-samples", str(SHARD_SAMPLES), "--seed", "8"])
    assert code == 5 and "is not this packing's shard 0" in err.getvalue() and "another order" in err.getvalue()

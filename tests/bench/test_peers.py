"""The peers' contenders of `bench reads` and `bench weights` in --quick form, each in its own process.

Each must read exactly the bytes it was given (and be refused when they differ); a peer whose package
is not installed is skipped here with the reason, and reported as skipped (not failed) by the harness.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys

import pytest

from bench import peers, worker
from bench.common import WrongResult, run_scenario
from tests.conftest import make_fs

pytestmark = pytest.mark.slow
ROOT = peers.ROOT


def needs(contender: str) -> None:
    reason = peers.missing(contender)
    if reason:
        pytest.skip(f"{contender}: {reason}")


@pytest.fixture
def listed(flux_server, bucket):
    """24 synthetic objects of 1-20 KB under p/: ([key, size, crc32c], ...) as the scenario passes them."""
    flux_server.generate(bucket, 24, size=(1000, 20000), prefix="p/", seed=3)
    infos = sorted(make_fs(flux_server).find(f"{bucket}/p/", detail=True).values(), key=lambda i: i["name"])
    return [[i["name"].split("/", 1)[1], i["size"], i["crc32c"]] for i in infos]


def spec(flux_server, bucket, contender: str, objects: list) -> dict:
    return {"contender": contender, "url": flux_server.url, "bucket": bucket, "prefix": "p/", "objects": objects,
            "batch_bytes": 64 * 1024, "concurrency": 4, "fluxfs": {}}


@pytest.mark.parametrize("contender", ["fluxfs", "obstore", "tensorstore", "aiohttp"])
def test_reads_contender_reads_every_object(flux_server, bucket, listed, contender):
    needs(contender)
    out = peers.run_worker(spec(flux_server, bucket, contender, listed), timeout=120)
    assert out["objects"] == 24
    assert out["bytes"] == sum(o[1] for o in listed)
    assert out["wall_s"] > 0 and out["cpu_s"] >= 0 and out["peak_mb"] >= 0


@pytest.mark.parametrize("contender", ["fluxfs", "obstore", "tensorstore", "aiohttp"])
def test_reads_contender_refuses_bytes_that_differ(flux_server, bucket, listed, contender):
    needs(contender)
    listed[5][2] = "AAAAAA=="  # not the object's crc32c: the check must fail, naming the object
    with pytest.raises(WrongResult, match=listed[5][0]):
        peers.run_worker(spec(flux_server, bucket, contender, listed), timeout=120)


def test_reads_scenario_reports_the_aiohttp_contender_and_its_ratios_by_object_size(tmp_path):
    """A tiny `python -m bench reads` run: bare aiohttp is timed, and its throughput and CPU-per-GB ratios are keyed
    by the set and by the object size (`10KiB:fluxfs/aiohttp`), with the machine, commit and date recorded."""
    out = tmp_path / "reads.json"
    subprocess.run([sys.executable, "-m", "bench", "reads", "--profile", "local", "--objects", "40", "--size", "10240",
                    "--repeat", "1", "--only", "fluxfs,aiohttp", "--json", str(out)],
                   cwd=ROOT, check=True, capture_output=True, timeout=300)
    report = json.loads(out.read_text())
    aiohttp = report["sets"]["40x10KiB"]["contenders"]["aiohttp"]["median"]
    assert aiohttp["objects"] == 40 and aiohttp["bytes"] == 40 * 10240 and aiohttp["cpu_s_per_gb"] > 0
    for key in ("10KiB:fluxfs/aiohttp", "cpu:10KiB:fluxfs/aiohttp", "40x10KiB:fluxfs/aiohttp",
                "cpu:40x10KiB:fluxfs/aiohttp"):
        assert report["ratios"][key] > 0, key
    assert report["machine"]["cpus"] >= 1 and report["date"].endswith("Z") and "commit" in report


def test_readonly_contender_reads_every_object_with_compose_refused(flux_server, bucket, listed):
    """fluxfs-readonly: the server's read-only token, every write refused 403; its reads fall back to direct GETs."""
    flux_server.configure(read_only_token="bench-viewer")
    flux_server.reset_stats()
    out = peers.run_worker({**spec(flux_server, bucket, "fluxfs-readonly", listed), "token": "bench-viewer"},
                           timeout=120)
    assert out["objects"] == 24 and out["bytes"] == sum(o[1] for o in listed)
    requests = flux_server.stats()["requests"]
    assert requests.get("write", 0) == 0 and requests.get("compose", 0) >= 1  # tried, refused, not again per batch
    assert requests.get("read", 0) >= 24
    assert flux_server.list_names(bucket, "_fluxfs-tmp/") == []


def _shards(torch):
    """Two small safetensors shards: bf16, f32 and int64 tensors of odd sizes."""
    g = torch.Generator().manual_seed(0)
    return [{"a.weight": torch.randn(300, 77, generator=g).to(torch.bfloat16), "a.norm": torch.randn(77, generator=g)},
            {"b.weight": torch.randn(129, 513, generator=g), "b.ids": torch.arange(1001, dtype=torch.int64)}]


def _digest(torch, t) -> list:
    return [str(t.dtype), list(t.shape), hashlib.sha256(t.contiguous().view(-1).view(torch.uint8).numpy()).hexdigest()]


LOAD = """
import hashlib, json, sys, torch
from bench import peer_weights
from bench.worker import leave
spec = json.loads(sys.argv[1])


def digests():
    got = peer_weights.LOADERS[spec["contender"]](torch, spec, spec["keys"], 64 * 1024, 4)
    return {n: [str(t.dtype), list(t.shape),
                hashlib.sha256(t.contiguous().view(-1).view(torch.uint8).numpy()).hexdigest()] for n, t in got.items()}


leave(digests)
"""


def _load(flux_server, bucket, contender: str, env: dict) -> None:
    """`contender` loads two shards in its own process (`LOAD`, `env` added): exactly their tensors."""
    needs(contender)
    torch = pytest.importorskip("torch")
    st = pytest.importorskip("safetensors.torch")
    fs = make_fs(flux_server)
    shards, keys, sizes = _shards(torch), [], []
    for k, part in enumerate(shards):
        body = st.save(part)
        keys.append(f"m/model-{k + 1:05d}-of-00002.safetensors")
        sizes.append(len(body))
        fs.pipe_file(f"{bucket}/{keys[-1]}", body)
    job = {"contender": contender, "url": flux_server.url, "bucket": bucket, "keys": keys, "shard_sizes": sizes}
    env = {**os.environ, "PYTHONPATH": worker.pythonpath(str(ROOT)),
           **peers.peer_env(contender, flux_server.url, 4, 64 * 1024), **env}
    got = worker.run_python(["-c", LOAD, json.dumps(job)], what=f"{contender} load", env=env, timeout=120)
    assert got == {n: _digest(torch, t) for part in shards for n, t in part.items()}


@pytest.mark.parametrize("contender", ["runai", "obstore", "tensorstore"])
def test_weights_peer_loads_every_tensor(flux_server, bucket, contender):
    _load(flux_server, bucket, contender, {})


# obstore resolves each asyncio future from one of its tokio threads (loop.call_soon_threadsafe): the loop can run
# the callback, and the worker finish, while that thread is still writing the loop's wake-up byte. Python < 3.14
# ends a thread that takes the GIL back during interpreter finalization with pthread_exit, which aborts (SIGABRT)
# when it unwinds through Rust frames. Here those threads return from the write only once the interpreter is
# finalizing (they poll for it, the GIL released between polls): the race is always lost.
LATE_DELIVERY = """
import sys, threading, time
from asyncio import selector_events

_write = selector_events.BaseSelectorEventLoop._write_to_self


def _late(self):
    _write(self)
    while threading.current_thread() is not threading.main_thread() and not sys.is_finalizing():
        time.sleep(0.001)


selector_events.BaseSelectorEventLoop._write_to_self = _late
"""


@pytest.fixture
def late_delivery(tmp_path) -> str:
    """A PYTHONPATH entry whose sitecustomize makes the peers' threads return late from waking the event loop."""
    (tmp_path / "sitecustomize.py").write_text(LATE_DELIVERY)
    return str(tmp_path)


def test_obstore_weights_worker_exits_0_while_a_result_is_still_being_delivered(flux_server, bucket, late_delivery):
    _load(flux_server, bucket, "obstore", {"PYTHONPATH": os.pathsep.join([str(ROOT), late_delivery])})


def test_obstore_reads_worker_exits_0_while_a_result_is_still_being_delivered(flux_server, bucket, listed,
                                                                                late_delivery, monkeypatch):
    needs("obstore")
    monkeypatch.setenv("PYTHONPATH", late_delivery)
    out = peers.run_worker(spec(flux_server, bucket, "obstore", listed), timeout=120)
    assert (out["objects"], out["bytes"]) == (24, sum(o[1] for o in listed))


def test_obstore_refusal_exits_1_while_a_result_is_still_being_delivered(flux_server, bucket, listed,
                                                                          late_delivery, monkeypatch):
    needs("obstore")
    monkeypatch.setenv("PYTHONPATH", late_delivery)
    listed[0][2] = "AAAAAA=="
    with pytest.raises(WrongResult, match=rf"(?s)^obstore \(exit status 1\): .*wrong bytes for {listed[0][0]}: "
                                          rf"{listed[0][1]} bytes with crc32c \S+, expected {listed[0][1]} bytes "
                                          rf"with crc32c AAAAAA==$"):
        peers.run_worker(spec(flux_server, bucket, "obstore", listed), timeout=120)


def test_a_worker_killed_by_a_signal_is_reported_by_name_with_what_it_printed():
    script = "import json, os; print(json.dumps({'done': 1}), flush=True); os.abort()"
    with pytest.raises(RuntimeError, match=r"^demo worker \(killed by SIGABRT, after printing its result\): "
                                           r"nothing on stderr$"):
        worker.run_python(["-c", script], what="demo worker", env=dict(os.environ), timeout=60)


def test_missing_peer_is_reported_skipped_not_failed(flux_server, bucket, listed, monkeypatch):
    monkeypatch.setitem(peers.PACKAGES, "obstore", ("no_such_peer_package",))
    args = argparse.Namespace(repeat=1, only=None, profile="local", json=None)
    report = run_scenario("peers", args, {}, {"obstore": lambda: peers.run_worker(
        spec(flux_server, bucket, "obstore", listed))}, "objects_per_s", [])
    assert report["contenders"]["obstore"] == {
        "skipped": "no_such_peer_package is not installed (pip install 'fluxfs[peers]')"}

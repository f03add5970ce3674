"""Gloo ranks over embedded servers, for the collective-read tests (tests/weights/test_group.py,
tests/checkpoint/test_dcp_group.py): rank r reads through the r-th server (servers sharing one --root), so
what server r sent is exactly what rank r read from storage.

The test writes its objects through `written_root(ROOT)` (a server, a filesystem, a new bucket), then runs
`run_ranks_on(ROOT, first, RANKS, "tests.x._child", OUT, *args)` (or `run_ranks` over URLs of its choosing); the
child module's `__main__` is `start_ranks(rank_main)`, which forks one gloo rank per URL and calls
`rank_main(rank, *args)` with a `GlooRank`; each rank's `report` is written to OUT/rank<r>.json, even when it
fails, and `run_ranks` returns them.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

import torch

ROOT = Path(__file__).resolve().parents[1]


def digests(state: dict) -> dict:
    """{name: [dtype, shape, sha256 of the bytes]} of a state dict's tensors: what two loads are compared by."""
    return {k: [str(v.dtype), list(v.shape),
                hashlib.sha256(v.contiguous().reshape(-1).view(torch.uint8).numpy()).hexdigest()]
            for k, v in state.items()}


def run_ranks(module: str, out: Path, urls: list[str], *args: str) -> list[dict]:
    """Run `python -m module OUT PORT URL,URL... ARGS...` (one gloo rank per server URL); every rank's report."""
    from tests.pipes.test_distributed import free_port

    # Its own process group, so a hung run's forked ranks are killed with it, not left running.
    proc = subprocess.Popen([sys.executable, "-m", module, str(out), str(free_port()), ",".join(urls), *args],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        _, stderr = proc.communicate(timeout=240)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        _, stderr = proc.communicate()
        raise AssertionError(f"{module}: ranks still running after 240 s (killed): {stderr[-4000:]}") from None
    assert proc.returncode == 0, stderr[-4000:]
    return [json.loads((Path(out) / f"rank{r}.json").read_text()) for r in range(len(urls))]


@contextlib.contextmanager
def written_root(root: Path) -> Iterator[tuple[Any, Any, str]]:
    """(an embedded server on `root`, a filesystem on it, a bucket made there): what a test writes its objects
    through before `run_ranks_on` starts the ranks' other servers on the same root."""
    from fluxfs.server import run
    from tests.conftest import make_fs, new_bucket_name

    with run(root=str(root)) as first:
        fs, bucket = make_fs(first), new_bucket_name()
        fs.mkdir(bucket)
        yield first, fs, bucket


def run_ranks_on(root: Path, first: Any, ranks: int, module: str, out: Path, *args: str) -> list[dict]:
    """`run_ranks` with rank 0 on server `first` and each other rank on a server of its own started now on `root`
    (after the writes: a server serves what its root held when it started)."""
    from fluxfs.server import run

    with contextlib.ExitStack() as stack:
        others = [stack.enter_context(run(root=str(root))) for _ in range(ranks - 1)]
        return run_ranks(module, out, [first.url, *(s.url for s in others)], *args)


@dataclass
class GlooRank:
    """One rank in the child: its number, the world size, its server (`ServerHandle`), the storage options that
    read through it, and the report written for the test."""

    rank: int
    world: int
    server: Any
    options: dict
    report: dict = field(default_factory=dict)

    def measured(self, name: str, call: Callable[[], Any]) -> Any:
        """`call()` between barriers; report[name] gets what this rank's server sent meanwhile (bytes, data GETs,
        list calls, keys scanned). Returns what `call` returned."""
        import torch.distributed as dist

        dist.barrier()
        before = self.server.stats()
        got = call()
        dist.barrier()
        after = self.server.stats()
        self.report[name] = {"bytes": after["bytes_out"] - before["bytes_out"],
                             "data_reads": after["data_reads"] - before["data_reads"],
                             "lists": after["requests"].get("list", 0) - before["requests"].get("list", 0),
                             "keys": after["keys_scanned"] - before["keys_scanned"]}
        return got


def _rank(rank: int, rank_main: Callable[..., None], out: str, port: int, urls: list[str], args: list[str]) -> None:
    import torch.distributed as dist

    from fluxfs.server import ServerHandle

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=len(urls))
    me = GlooRank(rank, len(urls), ServerHandle(urls[rank]), {"endpoint_url": urls[rank], "token": "anon"})
    try:
        rank_main(me, *args)
        dist.barrier()
    finally:
        with open(os.path.join(out, f"rank{rank}.json"), "w") as f:
            json.dump(me.report, f)
        dist.destroy_process_group()


def start_ranks(rank_main: Callable[..., None]) -> None:
    """The child module's `__main__`: `OUT PORT URL,URL... ARGS...` from argv, one forked gloo rank per URL."""
    out, port, urls, *args = sys.argv[1:]
    endpoints = urls.split(",")
    torch.multiprocessing.start_processes(_rank, args=(rank_main, out, int(port), endpoints, args),
                                          nprocs=len(endpoints), start_method="fork")
